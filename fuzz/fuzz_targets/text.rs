#![no_main]
//! Text and meta requests, pipelined: any bytes fed to the server-side decoder.

use libfuzzer_sys::fuzz_target;
use tierkv_protocol::Limits;

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    // A small value limit so large-value paths are reachable.
    let limits = Limits { max_value_bytes: 4096, ..Limits::default() };
    common::check_stream(data, &limits);
});
