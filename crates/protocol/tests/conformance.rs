//! Conformance tables: exact request bytes -> decoded request or memcached's error, from
//! memcached 1.6's protocol.txt and its text/binary command handlers.

use tierkv_protocol::binary::{self, opcode, status};
use tierkv_protocol::client::binary_info;
use tierkv_protocol::*;

fn decode(input: &[u8]) -> Decoded<'_> {
    decode_request(input, &Limits::default())
}

fn decode_with<'a>(input: &'a [u8], limits: &Limits) -> Decoded<'a> {
    decode_request(input, limits)
}

fn request(input: &[u8]) -> Request<'_> {
    match decode(input) {
        Decoded::Request { request, consumed } => {
            assert_eq!(consumed, input.len(), "{:?} must be consumed whole", String::from_utf8_lossy(input));
            request
        }
        other => panic!("{:?} -> {other:?}", String::from_utf8_lossy(input)),
    }
}

fn error(input: &[u8]) -> ProtocolError {
    match decode(input) {
        Decoded::Error(error) => error,
        other => panic!("{:?} -> {other:?}", String::from_utf8_lossy(input)),
    }
}

fn text(command: Command<'_>, noreply: bool) -> Request<'_> {
    Request { command, style: ReplyStyle::Text { noreply } }
}

fn keys(request: &Request<'_>) -> Vec<Vec<u8>> {
    match request.command {
        Command::Get { keys, .. } => keys.iter().map(|k| k.to_vec()).collect(),
        _ => panic!("not a get"),
    }
}

const BAD_FORMAT: ErrorReply = ErrorReply::Client("bad command line format");

#[test]
fn retrieval_commands() {
    let r = request(b"get foo\r\n");
    assert_eq!(keys(&r), [b"foo"]);
    assert!(matches!(r.command, Command::Get { return_cas: false, touch: None, .. }));
    assert_eq!(r.style, ReplyStyle::Text { noreply: false });
    let r = request(b"gets a  b c\r\n");
    assert_eq!(keys(&r), [&b"a"[..], b"b", b"c"]);
    assert!(matches!(r.command, Command::Get { return_cas: true, .. }));
    let r = request(b"gat 10 a b\r\n");
    assert!(matches!(r.command, Command::Get { return_cas: false, touch: Some(10), .. }));
    assert_eq!(keys(&r), [b"a", b"b"]);
    let r = request(b"gats -1 a\r\n");
    assert!(matches!(r.command, Command::Get { return_cas: true, touch: Some(-1), .. }));
    assert_eq!(keys(&request(b"get foo\n")), [b"foo"], "a bare newline ends a line too");
}

#[test]
fn retrieval_errors() {
    assert_eq!(
        error(b"get\r\n"),
        ProtocolError { reply: ErrorReply::Error, skip: 5, close: false, noreply: false, unlink: None }
    );
    let long = [b"get ".to_vec(), vec![b'k'; 251], b"\r\n".to_vec()].concat();
    assert_eq!(error(&long).reply, BAD_FORMAT);
    assert_eq!(error(&long).skip, long.len());
    assert_eq!(error(b"gat x a\r\n").reply, ErrorReply::Client("invalid exptime argument"));
    assert!(keys(&request(b"gat 10\r\n")).is_empty(), "memcached answers a gat without keys with END");
}

#[test]
fn a_300_key_get_of_250_byte_keys_works() {
    let mut line = b"get".to_vec();
    for i in 0..300u32 {
        line.push(b' ');
        let mut key = vec![b'a' + (i % 26) as u8; 250];
        key[..4].copy_from_slice(&i.to_be_bytes().map(|b| b'0' + b % 10));
        line.extend_from_slice(&key);
    }
    assert!(matches!(decode(&line), Decoded::Incomplete { .. }), "long retrieval lines may wait for their end");
    line.extend_from_slice(b"\r\n");
    assert_eq!(keys(&request(&line)).len(), 300);
}

#[test]
fn lines_without_newline_are_bounded() {
    let junk = vec![b'x'; 2049];
    let e = error(&junk);
    assert_eq!((e.reply, e.close), (ErrorReply::Nothing, true), "memcached closes the connection");
    assert!(matches!(decode(&junk[..2048]), Decoded::Incomplete { .. }));
    // get and gets lines may be of any length (the server takes their keys as they arrive);
    // every other command, gat and gats included, keeps the 2048-byte rule.
    let huge_get = [b"get ".to_vec(), vec![b'k'; 1 << 20]].concat();
    assert!(matches!(decode(&huge_get), Decoded::Incomplete { .. }));
    let huge_gat = [b"gat 0 ".to_vec(), vec![b'k'; 4096]].concat();
    assert!(error(&huge_gat).close);
}

#[test]
fn get_lines_take_any_number_of_keys() {
    let keys: Vec<String> = (0..20_000).map(|i| format!("key:{i}")).collect();
    let line = format!("get {}\r\n", keys.join(" "));
    let decoded = request(line.as_bytes());
    let Command::Get { keys: got, .. } = decoded.command else { panic!("a get") };
    assert_eq!(got.len(), 20_000);
    assert_eq!(got.iter().last(), Some(&b"key:19999"[..]));
}

#[test]
fn long_get_lines_are_taken_in_chunks() {
    use tierkv_protocol::text::{long_get, LongGet};
    let limits = Limits::default();
    let keys: Vec<String> = (0..1000).map(|i| format!("k{i}")).collect();
    let line = format!("gets {}\r\n", keys.join(" "));
    assert_eq!(long_get(line.as_bytes(), &limits, 1 << 20), LongGet::No, "short lines decode whole");
    let LongGet::Keys { request, consumed, verb } = long_get(line.as_bytes(), &limits, 1000) else { panic!() };
    assert_eq!(verb, b"gets ");
    let Command::Get { keys: got, return_cas: true, .. } = request.command else { panic!("a gets") };
    let taken: Vec<&[u8]> = got.iter().collect();
    assert!(consumed <= 1000 && taken.len() > 100);
    assert_eq!(taken, keys[..taken.len()].iter().map(|k| k.as_bytes()).collect::<Vec<_>>());
    assert!(line.as_bytes()[consumed..].starts_with(keys[taken.len()].as_bytes()), "the rest starts at a key");
    // An unterminated line is taken the same way; the key cut by the window end is not taken.
    let partial = &line.as_bytes()[..3000];
    let LongGet::Keys { consumed: partial_consumed, .. } = long_get(partial, &limits, 1000) else { panic!() };
    assert_eq!(partial_consumed, consumed);
    // The last key of a complete line is never taken.
    let two = format!("get {} last\r\n", "x".repeat(200));
    let LongGet::Keys { request, .. } = long_get(two.as_bytes(), &limits, 208) else { panic!() };
    assert!(matches!(request.command, Command::Get { keys, .. } if keys.len() == 1));
    let bad = format!("get a {} b{}\r\n", "x".repeat(251), " c".repeat(100));
    assert_eq!(long_get(bad.as_bytes(), &limits, 300), LongGet::BadKey);
    assert_eq!(long_get(format!("gat 0 {}", "k ".repeat(2000)).as_bytes(), &limits, 100), LongGet::No);
    let set = [b"set k 0 0 100000\r\n".to_vec(), vec![b'a'; 100_000]].concat();
    assert_eq!(long_get(&set, &limits, 1000), LongGet::No, "only get lines");
    let spaced = format!("get k{}", " ".repeat(5000));
    assert_eq!(long_get(spaced.as_bytes(), &limits, 1000), LongGet::Wait, "no key can be taken yet");
}

#[test]
fn cross_protocol_requests_close_without_a_reply() {
    for line in [&b"GET / HTTP/1.1\r\n"[..], b"HTTP/1.1\r\n", b"POST /x HTTP/1.0\r\n", b"foo bar HTTP/2\r\n"] {
        let e = error(line);
        assert_eq!((e.reply, e.close, e.skip), (ErrorReply::Nothing, true, line.len()), "{line:?}");
    }
    // memcached answers ERROR for lines that start with one of its commands' letters.
    for line in [&b"gxt / HTTP/1.1\r\n"[..], b"mz HTTP/1.1\r\n", b"H HTTP/1.1\r\n", b"foo bar\r\n"] {
        assert_eq!(error(line).reply, ErrorReply::Error, "{line:?}");
    }
    assert!(matches!(request(b"get foo HTTP/1.1\r\n").command, Command::Get { .. }), "still a get");
}

#[test]
fn items_too_large_follow_memcacheds_boundary_and_name_the_key_to_unlink() {
    let limits = Limits { max_value_bytes: 1 << 20, ..Limits::default() };
    let set = |key: &str, flags: u32, len: usize| {
        let mut input = format!("set {key} {flags} 0 {len}\r\n").into_bytes();
        input.extend(std::iter::repeat_n(b'v', len));
        input.extend_from_slice(b"\r\n");
        input
    };
    // memcached 1.6.18 with -I 1m: key "k" stores 1,048,516 bytes (59 bytes of overhead).
    let fits = set("k", 0, (1 << 20) - 60);
    assert!(matches!(decode_with(&fits, &limits), Decoded::Request { .. }));
    let input = set("k", 0, (1 << 20) - 59);
    let Decoded::Error(e) = decode_with(&input, &limits) else { panic!("refused") };
    assert_eq!(e.reply, ErrorReply::Server("object too large for cache"));
    assert_eq!(e.unlink.map(|span| span.key(&input).raw), Some(&b"k"[..]), "a refused set unlinks its key");
    assert!(matches!(decode_with(&set("k", 1, (1 << 20) - 63), &limits), Decoded::Error(_)), "flags cost 4");
    let add = [b"add k 0 0 2000000\r\n".as_slice()].concat();
    let Decoded::Error(e) = decode_with(&add, &limits) else { panic!() };
    assert_eq!(e.unlink, None, "add, replace, append, prepend and cas leave the old item");
    let ms = b"ms a2V5 2000000 b\r\n";
    let Decoded::Error(e) = decode_with(ms, &limits) else { panic!() };
    let span = e.unlink.expect("every ms mode unlinks");
    assert_eq!((span.key(ms).raw, span.base64), (&b"a2V5"[..], true));
}

#[test]
fn storage_commands() {
    let r = request(b"set foo 5 10 3\r\nbar\r\n");
    let set =
        |mode, flags, exptime, value, cas| Command::Store { mode, key: Key::plain(b"foo"), flags, exptime, value, cas };
    assert_eq!(r, text(set(StoreMode::Set, 5, 10, &b"bar"[..], 0), false));
    assert_eq!(request(b"add foo 0 0 0 noreply\r\n\r\n"), text(set(StoreMode::Add, 0, 0, b"", 0), true));
    assert_eq!(request(b"replace foo 0 -1 1\r\nx\r\n"), text(set(StoreMode::Replace, 0, -1, b"x", 0), false));
    assert_eq!(request(b"append foo 0 0 1\r\nx\r\n"), text(set(StoreMode::Append, 0, 0, b"x", 0), false));
    assert_eq!(request(b"prepend foo 0 0 1\r\nx\r\n"), text(set(StoreMode::Prepend, 0, 0, b"x", 0), false));
    assert_eq!(request(b"cas foo 1 2 1 99\r\nx\r\n"), text(set(StoreMode::Cas, 1, 2, b"x", 99), false));
    assert_eq!(request(b"cas foo 1 2 1 99 noreply\r\nx\r\n"), text(set(StoreMode::Cas, 1, 2, b"x", 99), true));
    assert_eq!(request(b"set foo 4294967297 0 1\r\nx\r\n"), text(set(StoreMode::Set, 1, 0, b"x", 0), false));
    assert_eq!(request(b"set foo 0 0 2\r\n\r\n\r\n"), text(set(StoreMode::Set, 0, 0, b"\r\n", 0), false));
    assert!(matches!(decode(b"set foo 0 0 3\r\nba"), Decoded::Incomplete { needed: 20 }));
}

#[test]
fn storage_errors() {
    let e = error(b"set foo 0 0 3\r\nbarX\r\n");
    assert_eq!((e.reply, e.skip), (ErrorReply::Client("bad data chunk"), 20));
    let e = error(b"set foo 0 0 2000000\r\n");
    assert_eq!((e.reply, e.skip), (ErrorReply::Server("object too large for cache"), 21 + 2_000_002));
    let e = error(b"set foo abc 0 1\r\nx\r\n");
    assert_eq!((e.reply, e.skip), (BAD_FORMAT, 17), "the data block is not swallowed, as in memcached");
    assert_eq!(error(b"set foo 0 0 -1\r\n").reply, BAD_FORMAT);
    assert_eq!(error(b"set foo 0 0\r\n").reply, ErrorReply::Error);
    assert_eq!(error(b"cas foo 0 0 1\r\nx\r\n").reply, ErrorReply::Error);
    assert_eq!(error(b"cas foo 0 0 1 x\r\nx\r\n").reply, BAD_FORMAT);
    assert!(error(b"set foo x 0 1 noreply\r\n").noreply);
    let long = [b"set ".to_vec(), vec![b'k'; 251], b" 0 0 1\r\nx\r\n".to_vec()].concat();
    assert_eq!(error(&long).reply, BAD_FORMAT);
}

#[test]
fn other_commands() {
    let key = Key::plain(b"foo");
    assert_eq!(request(b"delete foo\r\n"), text(Command::Delete { key, cas: 0 }, false));
    assert_eq!(request(b"delete foo noreply\r\n"), text(Command::Delete { key, cas: 0 }, true));
    assert_eq!(request(b"delete foo 0\r\n"), text(Command::Delete { key, cas: 0 }, false));
    assert_eq!(request(b"delete foo 0 noreply\r\n"), text(Command::Delete { key, cas: 0 }, true));
    let key_noreply = Key::plain(b"noreply");
    assert_eq!(
        request(b"delete noreply\r\n"),
        text(Command::Delete { key: key_noreply, cas: 0 }, false),
        "found by fuzzing"
    );
    assert_eq!(
        error(b"delete foo 1\r\n").reply,
        ErrorReply::Client("bad command line format.  Usage: delete <key> [noreply]")
    );
    let arith = |delta, decrement| Command::Arith { key, delta, decrement, initial: None, cas: 0 };
    assert_eq!(request(b"incr foo 5\r\n"), text(arith(5, false), false));
    assert_eq!(request(b"decr foo 18446744073709551615 noreply\r\n"), text(arith(u64::MAX, true), true));
    assert_eq!(error(b"incr foo x\r\n").reply, ErrorReply::Client("invalid numeric delta argument"));
    assert_eq!(error(b"incr foo -1\r\n").reply, ErrorReply::Client("invalid numeric delta argument"));
    assert_eq!(request(b"touch foo 10\r\n"), text(Command::Touch { key, exptime: 10 }, false));
    assert_eq!(error(b"touch foo x\r\n").reply, ErrorReply::Client("invalid exptime argument"));
    assert_eq!(request(b"flush_all\r\n"), text(Command::FlushAll { delay: 0 }, false));
    assert_eq!(request(b"flush_all 10\r\n"), text(Command::FlushAll { delay: 10 }, false));
    assert_eq!(request(b"flush_all noreply\r\n"), text(Command::FlushAll { delay: 0 }, true));
    assert_eq!(request(b"flush_all 10 noreply\r\n"), text(Command::FlushAll { delay: 10 }, true));
    assert_eq!(
        error(b"flush_all x\r\n").reply,
        ErrorReply::Client("invalid exptime argument"),
        "as Debian's 1.6.18 says"
    );
    assert_eq!(request(b"stats\r\n"), text(Command::Stats { args: b"" }, false));
    assert_eq!(request(b"stats settings\r\n"), text(Command::Stats { args: b"settings" }, false));
    assert_eq!(request(b"stats  detail on\r\n"), text(Command::Stats { args: b"detail on" }, false));
    assert_eq!(request(b"version\r\n"), text(Command::Version, false));
    assert_eq!(request(b"quit\r\n"), text(Command::Quit, false));
    assert_eq!(request(b"verbosity 1\r\n"), text(Command::Verbosity { level: 1 }, false));
    assert_eq!(request(b"verbosity 1 noreply\r\n"), text(Command::Verbosity { level: 1 }, true));
    assert_eq!(error(b"verbosity\r\n").reply, ErrorReply::Error);
    assert_eq!(error(b"bogus\r\n").reply, ErrorReply::Error);
    assert_eq!(error(b"\r\n").reply, ErrorReply::Error);
    assert_eq!(error(b"GET foo\r\n").reply, ErrorReply::Error, "commands are case-sensitive");
}

fn meta(input: &[u8]) -> (Command<'_>, meta::MetaFlags<'_>) {
    let r = request(input);
    match r.style {
        ReplyStyle::Meta(flags) => (r.command, flags),
        other => panic!("{other:?}"),
    }
}

#[test]
fn meta_commands() {
    assert_eq!(meta(b"mn\r\n").0, Command::Noop);
    let (command, flags) = meta(b"mg foo s v q Oabc k t\r\n");
    assert!(matches!(command, Command::Get { return_cas: false, touch: None, base64: false, .. }));
    assert!(flags.has(b's') && flags.has(b'v') && flags.quiet() && flags.has(b'k'));
    assert_eq!(flags.opaque(), Some(&b"abc"[..]));
    assert_eq!(flags.iter().collect::<Vec<_>>(), [&b"s"[..], b"v", b"q", b"Oabc", b"k", b"t"]);
    let (command, _) = meta(b"mg foo c T30\r\n");
    assert!(matches!(command, Command::Get { return_cas: true, touch: Some(30), .. }));
    let (command, _) = meta(b"mg Zm9v b v\r\n");
    let Command::Get { keys, base64: true, .. } = command else { panic!() };
    let mut buffer = [0u8; 250];
    assert_eq!(Key { raw: keys.iter().next().unwrap(), base64: true }.decode_into(&mut buffer), Some(&b"foo"[..]));
    let (command, flags) = meta(b"ms foo 2 T10 F5 k\r\nhi\r\n");
    assert_eq!(
        command,
        Command::Store { mode: StoreMode::Set, key: Key::plain(b"foo"), flags: 5, exptime: 10, value: b"hi", cas: 0 }
    );
    assert!(flags.has(b'k'));
    assert!(matches!(meta(b"ms foo 2 MA\r\nhi\r\n").0, Command::Store { mode: StoreMode::Append, .. }));
    assert!(matches!(meta(b"ms foo 2 ME\r\nhi\r\n").0, Command::Store { mode: StoreMode::Add, .. }));
    assert!(matches!(meta(b"ms foo 2 MP\r\nhi\r\n").0, Command::Store { mode: StoreMode::Prepend, .. }));
    assert!(matches!(meta(b"ms foo 2 MR\r\nhi\r\n").0, Command::Store { mode: StoreMode::Replace, .. }));
    assert!(matches!(meta(b"ms foo 2 C5\r\nhi\r\n").0, Command::Store { mode: StoreMode::Cas, cas: 5, .. }));
    assert!(matches!(meta(b"ms foo 2 MR C5\r\nhi\r\n").0, Command::Store { mode: StoreMode::Cas, .. }));
    assert!(matches!(meta(b"ms foo 2 MA C5\r\nhi\r\n").0, Command::Store { mode: StoreMode::Append, cas: 5, .. }));
    assert_eq!(meta(b"md foo q C5\r\n").0, Command::Delete { key: Key::plain(b"foo"), cas: 5 });
    assert_eq!(
        meta(b"ma foo D5 MD N0 J10\r\n").0,
        Command::Arith {
            key: Key::plain(b"foo"),
            delta: 5,
            decrement: true,
            initial: Some(ArithInitial { value: 10, exptime: 0 }),
            cas: 0
        }
    );
    assert_eq!(
        meta(b"ma foo\r\n").0,
        Command::Arith { key: Key::plain(b"foo"), delta: 1, decrement: false, initial: None, cas: 0 }
    );
    assert_eq!(meta(b"me foo\r\n").0, Command::MetaDebug { key: Key::plain(b"foo") });
}

#[test]
fn meta_errors() {
    let client = |input: &[u8]| error(input).reply;
    assert_eq!(error(b"mg\r\n").reply, ErrorReply::Error);
    assert_eq!(client(b"mg foo v v\r\n"), ErrorReply::Client("duplicate flag"));
    assert_eq!(client(b"mg foo z\r\n"), ErrorReply::Client("invalid flag"));
    assert_eq!(client(b"mg !!!! b\r\n"), ErrorReply::Client("error decoding key"));
    assert_eq!(client(b"mg foo Tx\r\n"), ErrorReply::Client("bad token in command line format"));
    let opaque = [b"mg foo O".to_vec(), vec![b'1'; 32], b"\r\n".to_vec()].concat();
    assert_eq!(client(&opaque), ErrorReply::Client("opaque token too long"));
    let many = [b"mg foo".to_vec(), b" v s t c f k q Oa l h u T1 N1 R1 F1 C1 D1 P".to_vec(), b"\r\n".to_vec()].concat();
    assert_eq!(client(&many), ErrorReply::Client("options flags are too long"));
    assert_eq!(client(b"ms foo\r\n"), BAD_FORMAT);
    assert_eq!(client(b"ms foo bar\r\n"), BAD_FORMAT);
    let e = error(b"ms foo 2 MX\r\nhi\r\n");
    assert_eq!((e.reply, e.skip), (ErrorReply::Client("invalid mode for ms M token"), 17), "ms errors swallow data");
    assert_eq!(client(b"ma foo MX\r\n"), ErrorReply::Client("invalid mode for ma M token"));
    assert_eq!(client(b"mg foo D-1\r\n"), ErrorReply::Client("invalid numeric delta value"));
    // md and ma answer every flag error but a long opaque with one message.
    assert_eq!(client(b"ma foo Dx\r\n"), ErrorReply::Client("invalid or duplicate flag"));
    assert_eq!(client(b"md foo q q\r\n"), ErrorReply::Client("invalid or duplicate flag"));
    assert_eq!(client(b"verbosity x\r\n"), BAD_FORMAT);
    assert_eq!(client(b"gat x\r\n"), ErrorReply::Client("invalid exptime argument"));
    assert_eq!(client(b"me\r\n"), BAD_FORMAT);
    let e = error(b"ms foo 2000000\r\n");
    assert_eq!(e.reply, ErrorReply::Server("object too large for cache"));
}

fn binary_request(op: u8, cas: u64, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    binary::write_request(&mut out, op, 0xDEAD_BEEF, cas, extras, key, value);
    out
}

fn bin(op: u8, command: Command<'_>) -> Request<'_> {
    Request { command, style: ReplyStyle::Binary(binary_info(op, 0xDEAD_BEEF)) }
}

#[test]
fn binary_commands() {
    let input = binary_request(opcode::GET, 0, &[], b"foo", &[]);
    assert_eq!(
        request(&input),
        bin(opcode::GET, Command::Get { keys: Keys::one(b"foo"), return_cas: true, touch: None, base64: false })
    );
    let input = binary_request(opcode::GETKQ, 0, &[], b"foo", &[]);
    let ReplyStyle::Binary(info) = request(&input).style else { panic!() };
    assert!(info.quiet && info.return_key);
    let extras = [0, 0, 0, 5, 0, 0, 0, 10];
    let input = binary_request(opcode::SET, 0, &extras, b"foo", b"bar");
    let store = |mode, cas| Command::Store { mode, key: Key::plain(b"foo"), flags: 5, exptime: 10, value: b"bar", cas };
    assert_eq!(request(&input), bin(opcode::SET, store(StoreMode::Set, 0)));
    let input = binary_request(opcode::SETQ, 7, &extras, b"foo", b"bar");
    assert_eq!(request(&input), bin(opcode::SETQ, store(StoreMode::Cas, 7)));
    let input = binary_request(opcode::ADD, 7, &extras, b"foo", b"bar");
    assert_eq!(request(&input), bin(opcode::ADD, store(StoreMode::Cas, 7)), "memcached: add with a CAS is a cas");
    let input = binary_request(opcode::APPEND, 0, &[], b"foo", b"bar");
    assert!(matches!(request(&input).command, Command::Store { mode: StoreMode::Append, flags: 0, .. }));
    let input = binary_request(opcode::DELETE, 9, &[], b"foo", &[]);
    assert_eq!(request(&input), bin(opcode::DELETE, Command::Delete { key: Key::plain(b"foo"), cas: 9 }));
    let mut extras = [0u8; 20];
    extras[7] = 5;
    extras[15] = 10;
    let input = binary_request(opcode::INCREMENT, 0, &extras, b"n", &[]);
    let initial = Some(ArithInitial { value: 10, exptime: 0 });
    let arith = Command::Arith { key: Key::plain(b"n"), delta: 5, decrement: false, initial, cas: 0 };
    assert_eq!(request(&input), bin(opcode::INCREMENT, arith));
    extras[16..].fill(0xFF);
    let input = binary_request(opcode::DECREMENT, 0, &extras, b"n", &[]);
    assert!(matches!(request(&input).command, Command::Arith { decrement: true, initial: None, .. }));
    let input = binary_request(opcode::FLUSH, 0, &[0, 0, 0, 9], b"", &[]);
    assert_eq!(request(&input).command, Command::FlushAll { delay: 9 });
    assert_eq!(request(&binary_request(opcode::FLUSHQ, 0, &[], b"", &[])).command, Command::FlushAll { delay: 0 });
    assert_eq!(request(&binary_request(opcode::NOOP, 0, &[], b"", &[])).command, Command::Noop);
    assert_eq!(request(&binary_request(opcode::VERSION, 0, &[], b"", &[])).command, Command::Version);
    assert_eq!(request(&binary_request(opcode::QUITQ, 0, &[], b"", &[])).command, Command::Quit);
    assert_eq!(
        request(&binary_request(opcode::STAT, 0, &[], b"settings", &[])).command,
        Command::Stats { args: b"settings" }
    );
    let input = binary_request(opcode::TOUCH, 0, &[0, 0, 0, 30], b"foo", &[]);
    assert_eq!(request(&input).command, Command::Touch { key: Key::plain(b"foo"), exptime: 30 });
    let input = binary_request(opcode::GATKQ, 0, &[0, 0, 0, 30], b"foo", &[]);
    assert!(matches!(request(&input).command, Command::Get { touch: Some(30), .. }));
    let input = binary_request(opcode::SASL_AUTH, 0, &[], b"PLAIN", b"\0u\0p");
    assert_eq!(request(&input).command, Command::Sasl { opcode: opcode::SASL_AUTH, key: b"PLAIN", value: b"\0u\0p" });
    assert!(matches!(
        request(&binary_request(opcode::SASL_LIST_MECHS, 0, &[], b"", &[])).command,
        Command::Sasl { .. }
    ));
}

#[test]
fn binary_errors() {
    let input = binary_request(0x50, 0, &[], b"foo", b"x");
    let e = error(&input);
    assert!(matches!(e.reply, ErrorReply::Binary { status: status::UNKNOWN_COMMAND, .. }));
    assert_eq!((e.skip, e.close), (input.len(), true), "memcached 1.6.18 closes after an unknown opcode");
    let input = binary_request(opcode::GET, 0, &[1, 2, 3, 4], b"foo", &[]);
    let e = error(&input);
    assert!(matches!(e.reply, ErrorReply::Binary { status: status::EINVAL, .. }));
    assert!(e.close, "memcached closes the connection on a malformed binary request");
    assert!(error(&binary_request(opcode::GET, 0, &[], &[b'k'; 251], &[])).close);
    assert!(error(&binary_request(opcode::GET, 0, &[], b"", &[])).close, "GET needs a key");
    let e = error(&binary_request(opcode::SET, 0, &[0; 8], b"foo", &vec![0; 2 << 20]));
    assert!(matches!(e.reply, ErrorReply::Binary { status: status::E2BIG, .. }));
    assert_eq!((e.skip, e.close), (24 + 8 + 3 + (2 << 20), false), "a too-large value is swallowed");
    assert_eq!(e.unlink.map(|span| (span.start, span.len)), Some((32, 3)), "a refused SET unlinks its key");
    let with_key = &binary_request(opcode::SET, 0, &[0; 8], b"foo", &vec![0; 2 << 20])[..24 + 8 + 3];
    assert!(
        matches!(error(with_key).reply, ErrorReply::Binary { status: status::E2BIG, .. }),
        "decided once the key is in"
    );
    let header_only = &with_key[..24];
    assert!(matches!(decode(header_only), Decoded::Incomplete { needed: 35 }));
    let e = error(&binary_request(opcode::ADD, 0, &[0; 8], b"foo", &vec![0; 2 << 20]));
    assert_eq!(e.unlink, None, "ADD leaves the old item");
    assert!(matches!(
        decode(&binary_request(opcode::GET, 0, &[], b"foo", &[])[..23]),
        Decoded::Incomplete { needed: 24 }
    ));
}

#[test]
fn binary_responses_are_exact() {
    let info = binary_info(opcode::GETK, 7);
    let mut out = Vec::new();
    binary::write_response(&mut out, &info, status::SUCCESS, 99, &5u32.to_be_bytes(), b"k", b"v");
    assert_eq!(
        out,
        [0x81, 0x0c, 0, 1, 4, 0, 0, 0, 0, 0, 0, 6, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 99, 0, 0, 0, 5, b'k', b'v']
    );
    out.clear();
    binary::write_error(&mut out, &info, status::KEY_ENOENT);
    assert_eq!(&out[24..], b"Not found");
    assert_eq!(u16::from_be_bytes([out[6], out[7]]), status::KEY_ENOENT);
}

#[test]
fn every_fixed_text_reply_is_exact() {
    use tierkv_protocol::reply::{self, Status};
    let table: [(Status, &[u8]); 9] = [
        (Status::End, b"END\r\n"),
        (Status::Stored, b"STORED\r\n"),
        (Status::NotStored, b"NOT_STORED\r\n"),
        (Status::Exists, b"EXISTS\r\n"),
        (Status::NotFound, b"NOT_FOUND\r\n"),
        (Status::Deleted, b"DELETED\r\n"),
        (Status::Touched, b"TOUCHED\r\n"),
        (Status::Ok, b"OK\r\n"),
        (Status::Reset, b"RESET\r\n"),
    ];
    for (status, bytes) in table {
        let mut out = Vec::new();
        reply::status(&mut out, status);
        assert_eq!(out, bytes);
        let decoded = client::decode_reply(&out, &Limits::default());
        assert_eq!(
            decoded,
            client::ReplyDecoded::Reply { reply: client::Reply::Status(status), consumed: bytes.len() }
        );
    }
}

#[test]
fn every_meta_code_is_exact() {
    use tierkv_protocol::reply::{self, MetaCode, MetaReturn};
    let flags = meta::parse_flags(b"O9 k c").unwrap();
    let info = MetaReturn { key: Some(b"foo"), cas: Some(5), ..MetaReturn::default() };
    let table: [(MetaCode, &[u8], &[u8]); 6] = [
        (MetaCode::Hd, reply::returned::SET, b"HD O9 kfoo c5\r\n"),
        (MetaCode::Ns, reply::returned::SET, b"NS O9 kfoo c5\r\n"),
        (MetaCode::Ex, reply::returned::SET, b"EX O9 kfoo c5\r\n"),
        (MetaCode::Nf, reply::returned::DELETE, b"NF O9 kfoo\r\n"),
        (MetaCode::En, reply::returned::GET_MISS, b"EN O9 kfoo\r\n"),
        (MetaCode::Mn, b"", b"MN\r\n"),
    ];
    for (code, letters, bytes) in table {
        let mut out = Vec::new();
        reply::meta(&mut out, code, &flags, letters, &info, None);
        assert_eq!(out, bytes, "{code:?}");
    }
    let mut out = Vec::new();
    let hit = MetaReturn { size: Some(2), ttl: Some(30), client_flags: Some(0), won: true, ..info };
    reply::meta(
        &mut out,
        MetaCode::Va,
        &meta::parse_flags(b"s t f v").unwrap(),
        reply::returned::GET_HIT,
        &hit,
        Some(b"hi"),
    );
    assert_eq!(out, b"VA 2 s2 t30 f0 W\r\nhi\r\n");
}

#[test]
fn extension_lines_with_only_noreply_are_client_errors() {
    // Found by the text fuzz target: "vlen noreply" left no key once noreply was taken.
    for verb in ["vnew", "vupd", "vget", "vlen", "atomic"] {
        for line in [format!("{verb} noreply\r\n"), format!("{verb}\r\n")] {
            let e = error(line.as_bytes());
            assert!(matches!(e.reply, ErrorReply::Client(_) | ErrorReply::Error), "{line:?} -> {e:?}");
        }
    }
}
