#![no_main]
//! Binary requests: the input follows a request magic byte.

use libfuzzer_sys::fuzz_target;
use tierkv_protocol::Limits;

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let limits = Limits { max_value_bytes: 4096, ..Limits::default() };
    let mut input = Vec::with_capacity(data.len() + 1);
    input.push(tierkv_protocol::binary::REQUEST_MAGIC);
    input.extend_from_slice(data);
    common::check_stream(&input, &limits);
});
