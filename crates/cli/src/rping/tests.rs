//! rping's advert encoding, and a softrnic client against a softrnic server.

use super::*;

#[test]
fn advert_round_trip() {
    let a = Advert {
        addr: 0x5629_408c_7700,
        rkey: 0x8d6b_a600,
        size: 100,
    };
    assert_eq!(Advert::parse(&a.to_bytes()), Some(a));
    assert_eq!(Advert::parse(&[0; 15]), None);
}

#[test]
fn softrnic_client_and_server_verify() {
    let opts = RpingOpts {
        count: 5,
        size: 100,
        verify: true,
        ..RpingOpts::default()
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let o = opts.clone();
    let s = std::thread::spawn(move || {
        server("127.0.0.1:0".parse().unwrap(), &o, |a| tx.send(a).unwrap())
    });
    let addr = rx.recv().unwrap();
    assert_eq!(client(addr, &opts).unwrap(), 5);
    assert_eq!(s.join().unwrap().unwrap(), 5);
}
