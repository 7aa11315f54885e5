#![no_main]
//! Meta flags: the input becomes the flag tokens of mg, ms, md and ma lines, and is parsed on
//! its own.

use libfuzzer_sys::fuzz_target;
use tierkv_protocol::meta::parse_flags;
use tierkv_protocol::Limits;

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    if let Ok(flags) = parse_flags(data) {
        assert_eq!(flags.tokens, data);
        for token in flags.iter() {
            assert!(!token.is_empty() && !token.contains(&b' '));
        }
    }
    if data.contains(&b'\n') {
        return;
    }
    let limits = Limits::default();
    for command in [&b"mg foo "[..], b"md foo ", b"ma foo ", b"ms foo 2 ", b"mg Zm9v "] {
        let mut line = command.to_vec();
        line.extend_from_slice(data);
        line.extend_from_slice(b"\r\nhi\r\n");
        common::check_stream(&line, &limits);
    }
});
