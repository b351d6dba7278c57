//! A complete softrnic program: two RNICs in one process, connected over loopback TCP.
//! The server exposes a buffer and tells the client its address and key in the MPA
//! private data; the client RDMA-Writes into it, then Sends a note that says "done";
//! the server, on receiving the Send, finds the Write's bytes in place.
//!
//! `cargo run -p softrnic-rnic --example rdma_hello`

use softrnic_rnic::*;
use std::time::Duration;

fn main() -> Result<()> {
    const MSG: &[u8] = b"written by RDMA, no server CPU involved";
    let (server_dev, client_dev) = (
        Device::open(DeviceConfig::default())?,
        Device::open(DeviceConfig::default())?,
    );

    // Server side: a PD, a CQ, a QP, a buffer the peer may write, and a receive buffer.
    let spd = server_dev.alloc_pd();
    let scq = server_dev.create_cq(16)?;
    let sqp = server_dev.create_qp(&spd, QpInit::new(&scq, 8, 8))?;
    let exposed = spd.alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let note = spd.alloc_mr(64, Access::LOCAL_WRITE)?;
    sqp.post_recv(RecvWr::new(1, note.sge(0, 64)))?;
    let listener = server_dev.listen("127.0.0.1:0")?;
    let addr = listener.local_addr()?;

    // The buffer's address and key travel in the accept's private data.
    let mut advert = exposed.addr().to_be_bytes().to_vec();
    advert.extend_from_slice(&exposed.rkey().to_be_bytes());
    let server = std::thread::spawn(move || -> Result<Qp> {
        let request = listener.accept()?;
        println!(
            "server: connection from {} says {:?}",
            request.peer_addr(),
            String::from_utf8_lossy(request.private_data())
        );
        request.accept(&sqp, &advert)?;
        Ok(sqp)
    });

    // Client side.
    let cpd = client_dev.alloc_pd();
    let ccq = client_dev.create_cq(16)?;
    let cqp = client_dev.create_qp(&cpd, QpInit::new(&ccq, 8, 8))?;
    let conn = client_dev.connect(addr, &cqp, b"hello")?;
    let sqp = server.join().expect("server thread")?;
    let pd = conn.peer_private_data();
    let remote_addr = u64::from_be_bytes(pd[..8].try_into().expect("8 octets"));
    let rkey = u32::from_be_bytes(pd[8..12].try_into().expect("4 octets"));
    println!(
        "client: connected, CRC {}, IRD/ORD {}/{}",
        conn.negotiated.crc, conn.negotiated.ird, conn.negotiated.ord
    );

    let src = cpd.alloc_mr(4096, Access::empty())?;
    src.write(0, MSG)?;
    src.write(100, b"done")?;
    cqp.post_send_batch([
        SendWr::write(10, src.sge(0, MSG.len()), remote_addr, rkey),
        SendWr::send(11, src.sge(100, 4)).solicited(),
    ])?;
    for wc in ccq.wait_for(2, Duration::from_secs(5)) {
        println!("client: {:?} wr {} {:?}", wc.opcode, wc.wr_id, wc.status);
    }

    // The Send arrives after the Write (same connection, in order): the data is there.
    let wc = scq.wait_for(1, Duration::from_secs(5));
    let mut got = vec![0u8; MSG.len()];
    exposed.read(0, &mut got)?;
    println!(
        "server: {:?} of {} octets; buffer now holds {:?}",
        wc[0].opcode,
        wc[0].byte_len,
        String::from_utf8_lossy(&got)
    );
    assert_eq!(got, MSG);

    cqp.disconnect()?;
    let _ = server_dev.wait_event_matching(Duration::from_secs(5), |e| {
        matches!(e, AsyncEvent::Disconnected { .. })
    });
    drop(sqp);
    Ok(())
}
