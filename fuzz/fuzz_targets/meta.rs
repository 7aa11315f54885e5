#![no_main]
//! Meta flags: the input becomes the flag tokens of mg, ms, md and ma lines (and of tierkv's
//! mx and mv), and is parsed on its own.

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
    let commands = [
        &b"mg foo "[..],
        b"md foo ",
        b"ma foo ",
        b"ms foo 2 ",
        b"mg Zm9v ",
        // tierkv's own meta commands: their arguments, then the flags.
        b"mx foo add u64 1 ",
        b"mx foo cas i64 -1 2 ",
        b"mv foo new f32 4 ",
        b"mv foo upd add u64 0 2 ",
        b"mv foo get 0 1 ",
        b"mv foo len ",
    ];
    for command in commands {
        let mut line = command.to_vec();
        line.extend_from_slice(data);
        line.extend_from_slice(b"\r\nhi\r\n");
        common::check_stream(&line, &limits);
    }
});
