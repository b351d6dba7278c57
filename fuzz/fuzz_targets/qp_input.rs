#![no_main]
//! Fuzz target: see `softrnic_cli::fuzz_checks::qp_input` for the property checked.
libfuzzer_sys::fuzz_target!(|data: &[u8]| softrnic_cli::fuzz_checks::qp_input(data));
