//! Runs the softrnic rping client against an address (for trying a siw server by hand,
//! until `softrnic rping` is wired into the CLI):
//! `cargo run -p softrnic-cli --example rping_probe -- 127.0.0.1:7174 3 100 [crc]`
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let addr = a
        .get(1)
        .map_or("127.0.0.1:7174", String::as_str)
        .parse()
        .expect("address");
    let mut opts = softrnic_cli::rping::RpingOpts {
        count: a.get(2).and_then(|s| s.parse().ok()).unwrap_or(3),
        size: a.get(3).and_then(|s| s.parse().ok()).unwrap_or(100),
        verbose: true,
        verify: true,
        ..Default::default()
    };
    if a.get(4).is_some_and(|s| s == "crc") {
        opts.mpa.crc = softrnic_rnic::CrcPolicy::Required;
    }
    match softrnic_cli::rping::client(addr, &opts) {
        Ok(n) => println!("rping: {n} iterations verified"),
        Err(e) => {
            eprintln!("rping: {e}");
            std::process::exit(1);
        }
    }
}
