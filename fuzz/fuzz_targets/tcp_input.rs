#![no_main]
//! Fuzz target: see `softrnic_tcp::fuzz_input` for the script and the properties checked.
libfuzzer_sys::fuzz_target!(|data: &[u8]| softrnic_tcp::fuzz_input::connection_input(data));
