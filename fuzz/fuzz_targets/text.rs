#![no_main]
//! Text and meta requests, pipelined: any bytes fed to the server-side decoder, and to the
//! `-Y` login decoder that reads a connection before it has authenticated.

use libfuzzer_sys::fuzz_target;
use tierkv_protocol::auth::{self, AsciiAuth};
use tierkv_protocol::Limits;

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    // A small value limit so large-value paths are reachable.
    let limits = Limits { max_value_bytes: 4096, ..Limits::default() };
    common::check_stream(data, &limits);
    // The login decoder: each step takes bytes it was given (or waits, or closes), never more.
    let mut at = 0;
    while at < data.len() {
        match auth::decode(&data[at..]) {
            AsciiAuth::Incomplete | AsciiAuth::Close => break,
            AsciiAuth::Refused { consumed, reply } => {
                assert!(consumed > 0 && at + consumed <= data.len() && reply.ends_with(b"\r\n"));
                at += consumed;
            }
            AsciiAuth::Credentials { user, password, consumed } => {
                assert!(consumed > 0 && at + consumed <= data.len());
                assert!(user.len() + password.len() < consumed && !user.contains(&b' '));
                at += consumed;
            }
        }
    }
});
