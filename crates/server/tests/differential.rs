//! Differential tests: the same request bytes go to Debian's memcached (1.6.18) and to tierkv,
//! each started on a free loopback port; the replies must be the same bytes (CAS and version
//! aside). Also tierkv-bench against tierkv.

mod common;

use common::{exchange, exchange_binary_to_sentinel, exchange_to_sentinel, mask_cas, memcached, tierkv, tierkv_with};
use std::time::{Duration, Instant};

#[test]
fn text_and_meta_replies_match_memcached_byte_for_byte() {
    // Cache mode, then store mode: the operations mean the same in both.
    for mode in ["cache", "store"] {
        text_and_meta_replies_match_memcached_byte_for_byte_in(mode);
    }
}

fn text_and_meta_replies_match_memcached_byte_for_byte_in(mode: &str) {
    let (ours, theirs) = (tierkv_with(&["--mode", mode]), memcached());
    let long_key = [b"get ".to_vec(), vec![b'k'; 251], b"\r\n".to_vec()].concat();
    // A refused key, per command whose engine errors used to share a catch-all reply.
    let k251 = "k".repeat(251);
    let refusals: Vec<String> = [
        "set {k} 0 0 1\r\nx\r\n",
        "delete {k}\r\n",
        "incr {k} 1\r\n",
        "ms {k} 1\r\nx\r\n",
        "md {k}\r\n",
        "ma {k}\r\n",
        "ms !!!! 1 b\r\nx\r\nmg !!!! b v\r\nmn\r\n",
    ]
    .iter()
    .map(|case| case.replace("{k}", &k251))
    .collect();
    let mut cases: Vec<&[u8]> = refusals.iter().map(|case| case.as_bytes()).collect();
    cases.extend::<Vec<&[u8]>>(vec![
        b"set a 0 0 1\r\nx\r\nget a b a\r\n",
        b"set a 7 0 2\r\nxy\r\nget a\r\n",
        b"set a 0 0 1\r\nxy\r\n",
        &long_key,
        b"set n 0 0 3\r\n100\r\nincr n 5\r\ndecr n 200\r\nget n\r\nincr n 18446744073709551615\r\n",
        b"set s 0 0 2\r\nab\r\nincr s 1\r\nincr zz 1\r\nincr s x\r\n",
        b"delete a 5\r\ndelete a\r\ndelete a 0\r\ndelete nothing\r\n",
        b"set a 0 0 1\r\nx\r\nflush_all\r\nget a\r\nflush_all x\r\nflush_all 0 noreply\r\n",
        b"add b 0 0 1 noreply\r\nb\r\nadd b 0 0 1\r\nc\r\nget b\r\n",
        b"replace nope 0 0 1\r\nx\r\nappend nope 0 0 1\r\nx\r\nprepend nope 0 0 1\r\nx\r\n",
        b"set c 0 0 1\r\nx\r\nappend c 0 0 2\r\nyz\r\nprepend c 0 0 1\r\nw\r\nget c\r\n",
        b"cas nope 0 0 1 1\r\nc\r\n",
        b"set d 0 0 1\r\nx\r\ntouch d 100\r\ntouch zz 1\r\ngat 100 d zz\r\n",
        b"set q 0 0 -1\r\nset q 0 x 1\r\nset q\r\n",
        b"\r\nget\r\nbogus\r\nGET a\r\n",
        b"verbosity 1\r\nverbosity\r\nverbosity 1 noreply\r\n",
        b"set e 0 -1 1\r\nx\r\nget e\r\n",
        b"set f 4294967295 0 1\r\nx\r\nget f\r\n",
        b"delete noreply\r\nset noreply 0 0 1\r\nx\r\ndelete noreply\r\n",
        b"incr\r\ntouch a\r\ngat\r\ngat x a\r\n",
        // Meta commands.
        b"mn\r\n",
        b"ms a 2\r\nhi\r\nmg a v\r\nmg a s f t v\r\nmg zz v\r\nmg zz v q\r\nmn\r\n",
        b"ms b 2 T100 F5 k Oxy\r\nhi\r\nmg b f t k Oab v\r\n",
        b"ms c 1 MA\r\nx\r\nms c 1\r\ny\r\nms c 1 MA\r\nz\r\nmg c v\r\n",
        b"md a\r\nmd a\r\nmd a q\r\nmn\r\n",
        b"ms n 2\r\n10\r\nma n\r\nma n v\r\nma n MD D3 v\r\nma zz\r\n",
        b"ms s 2\r\nab\r\nma s\r\n",
        b"mg foo v v\r\nmg foo z\r\nms foo 2 MX\r\nhi\r\n",
        b"ms e 2 ME\r\nhi\r\nms e 2 ME\r\nho\r\nmg e v\r\n",
        b"mg Zm9v b v k\r\nms Zm9v 2 b\r\nhi\r\nmg Zm9v b v k\r\n",
        b"ms q 2 q\r\nhi\r\nmg q v q\r\nmn\r\n",
        // Anti-dogpiling: vivify on miss, recache tokens, invalidation, fetched state.
        b"mg viv v N30\r\nmg viv v N30\r\nmg viv s v\r\n",
        b"ms rc 2 T100\r\nhi\r\nmg rc v R200\r\nmg rc v R200\r\nmg rc v R30\r\n",
        b"ms hh 2\r\nhi\r\nmg hh h v\r\nget hh\r\nmg hh h v\r\n",
        b"ms st 2\r\nhi\r\nmd st I T30\r\nmg st v\r\nmg st v\r\nmd st q\r\nmg st v\r\n",
        b"md none I\r\nme none\r\nmg viv2 N0 v q\r\nmn\r\n",
        b"ms q2 1 q\r\n1\r\nma q2 q v\r\nma q2 q\r\nma q3 q N0 v\r\nma q4 q N0\r\nma q5 q\r\nmn\r\n",
        b"ms sk 2 T100\r\nhi\r\nms sk 2 T100\r\nh2\r\nms sk 2 C1 I\r\nho\r\nmg sk v s\r\nmg sk v\r\nms sk 2 C1 I\r\nxx\r\nmg sk v\r\n",
        b"ms tt 1 T100\r\n1\r\nmg tt t T30\r\nmg tt T50 t\r\nmg tt s t v T70\r\nmg tt t\r\n",
        // A failed ms with c returns c0 (and the other flags asked for).
        b"ms cx 2 c C999\r\nhi\r\nms cx 2 c k Oab I C1\r\nhi\r\nms cy 2 c q C5\r\nhi\r\nms cz 2 c MR k\r\nhi\r\nmn\r\n",
        b"ms cw 2\r\nhi\r\nms cw 2 c C1 T0\r\nho\r\nms cw 2 MA\r\nzz\r\nms cw 2 c ME\r\nzz\r\n",
        // Last: what a delay-1 flush hides depends on where each server's second boundary falls.
        b"set fl 0 0 1\r\nx\r\nflush_all 1\r\nget fl\r\n",
    ]);
    for case in cases {
        let (mine, reference) = (exchange(ours.1, case), exchange(theirs.1, case));
        assert_eq!(
            String::from_utf8_lossy(&mine),
            String::from_utf8_lossy(&reference),
            "request {:?}",
            String::from_utf8_lossy(case)
        );
    }
}

#[test]
fn gets_returns_a_cas_that_cas_accepts() {
    let server = tierkv();
    let reply = exchange(server.1, b"set k 0 0 1\r\nx\r\ngets k\r\n");
    let text = String::from_utf8(reply).unwrap();
    let cas = text.lines().nth(1).unwrap().split(' ').nth(4).unwrap().to_string();
    let request = format!("cas k 0 0 1 {cas}\r\ny\r\ncas k 0 0 1 {cas}\r\nz\r\nget k\r\n");
    let reply = exchange(server.1, request.as_bytes());
    assert_eq!(reply, b"STORED\r\nEXISTS\r\nVALUE k 0 1\r\ny\r\nEND\r\n");
}

#[test]
fn quit_closes_and_garbage_does_not_kill_the_server() {
    let server = tierkv();
    assert_eq!(
        exchange(server.1, b"version\r\nquit\r\nversion\r\n"),
        format!("VERSION 1.6.18-tierkv-{}\r\n", env!("CARGO_PKG_VERSION")).as_bytes()
    );
    let garbage: Vec<u8> = (0..5000u32).map(|i| (i * 7919 % 251) as u8).collect();
    let _ = exchange(server.1, &garbage);
    assert_eq!(exchange(server.1, b"set a 0 0 1\r\nx\r\nget a\r\n"), b"STORED\r\nVALUE a 0 1\r\nx\r\nEND\r\n");
}

/// A binary request.
fn bin(op: u8, key: &[u8], extras: &[u8], value: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    tierkv_protocol::binary::write_request(&mut out, op, 0x1122_3344, 0, extras, key, value);
    out
}

#[test]
fn binary_replies_match_memcached_byte_for_byte() {
    // Cache mode, then store mode: the operations mean the same in both.
    for mode in ["cache", "store"] {
        binary_replies_match_memcached_byte_for_byte_in(mode);
    }
}

fn binary_replies_match_memcached_byte_for_byte_in(mode: &str) {
    use tierkv_protocol::binary::opcode::*;
    let (ours, theirs) = (tierkv_with(&["--mode", mode]), memcached());
    let set_extras = [0, 0, 0, 5, 0, 0, 0, 0];
    let arith = |delta: u64, initial: u64, expiry: u32| {
        [delta.to_be_bytes().as_slice(), &initial.to_be_bytes(), &expiry.to_be_bytes()].concat()
    };
    let scripts: Vec<Vec<Vec<u8>>> = vec![
        vec![
            bin(SET, b"a", &set_extras, b"hi"),
            bin(GET, b"a", &[], &[]),
            bin(GETK, b"a", &[], &[]),
            bin(GETK, b"zz", &[], &[]),
            bin(GETKQ, b"zz", &[], &[]),
            bin(GET, b"zz", &[], &[]),
            bin(NOOP, b"", &[], &[]),
        ],
        vec![
            bin(ADD, b"a", &set_extras, b"x"),
            bin(ADD, b"a", &set_extras, b"y"),
            bin(REPLACE, b"nope", &set_extras, b"y"),
            bin(APPEND, b"nope", &[], b"z"),
            bin(NOOP, b"", &[], &[]),
        ],
        vec![
            bin(SET, b"n", &set_extras, b"10"),
            bin(INCREMENT, b"n", &arith(5, 0, 0), &[]),
            bin(DECREMENT, b"n", &arith(100, 0, 0), &[]),
            bin(INCREMENT, b"m", &arith(1, 7, 0), &[]),
            bin(INCREMENT, b"q", &arith(1, 7, u32::MAX), &[]),
        ],
        vec![
            bin(DELETE, b"a", &[], &[]),
            bin(DELETE, b"a", &[], &[]),
            bin(DELETEQ, b"zz", &[], &[]),
            bin(NOOP, b"", &[], &[]),
        ],
        vec![bin(SET, b"s", &set_extras, b"ab"), bin(INCREMENT, b"s", &arith(1, 0, 0), &[])],
        vec![
            bin(TOUCH, b"n", &100u32.to_be_bytes(), &[]),
            bin(TOUCH, b"zz", &100u32.to_be_bytes(), &[]),
            bin(GAT, b"n", &100u32.to_be_bytes(), &[]),
        ],
        vec![bin(FLUSH, b"", &[], &[]), bin(GET, b"n", &[], &[]), bin(FLUSHQ, b"", &[], &[]), bin(NOOP, b"", &[], &[])],
        vec![bin(0x50, b"x", &[], &[]), bin(NOOP, b"", &[], &[])],
        vec![bin(SASL_LIST_MECHS, b"", &[], &[]), bin(NOOP, b"", &[], &[])],
        vec![bin(SETQ, b"a", &set_extras, b"hi"), bin(GETQ, b"a", &[], &[]), bin(NOOP, b"", &[], &[])],
        // A refused key, per command whose engine errors used to share a catch-all status.
        vec![bin(SET, &[b'k'; 251], &set_extras, b"x")],
        vec![bin(DELETE, &[b'k'; 251], &[], &[])],
        vec![bin(INCREMENT, &[b'k'; 251], &arith(1, 0, 0), &[])],
        // stats detail: on and off answer the terminator, dump a `detailed` stat.
        vec![
            bin(STAT, b"detail on", &[], &[]),
            bin(GET, b"user:1", &[], &[]),
            bin(STAT, b"detail dump", &[], &[]),
            bin(STAT, b"detail off", &[], &[]),
            bin(STAT, b"detail bogus", &[], &[]),
            bin(STAT, b"detail", &[], &[]),
        ],
    ];
    for script in scripts {
        let request = script.concat();
        let (mine, reference) = (mask_cas(exchange(ours.1, &request)), mask_cas(exchange(theirs.1, &request)));
        assert_eq!(mine, reference, "binary script with opcodes {:?}", script.iter().map(|r| r[1]).collect::<Vec<_>>());
    }
}

#[test]
fn sigterm_and_sigint_stop_the_server_cleanly() {
    for signal in [libc::SIGTERM, libc::SIGINT] {
        let mut server = tierkv();
        assert_eq!(exchange(server.1, b"set a 0 0 1\r\nx\r\n"), b"STORED\r\n");
        // SAFETY: kill only sends a signal to the child this test started.
        assert_eq!(unsafe { libc::kill(server.0.id() as libc::pid_t, signal) }, 0);
        let deadline = Instant::now() + Duration::from_secs(5);
        let status = loop {
            if let Some(status) = server.0.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "the server did not stop on signal {signal}");
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success(), "a signal stop exits 0, got {status:?}");
    }
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[(self.next() % items.len() as u64) as usize]
    }
}

/// The verbs `generated_request` picks from (some invalid on purpose).
const VERBS: &[&str] = &[
    "get",
    "gat",
    "set",
    "add",
    "replace",
    "append",
    "prepend",
    "cas",
    "delete",
    "incr",
    "decr",
    "touch",
    "flush_all",
    "verbosity",
    "mn",
    "mg",
    "ms",
    "md",
    "ma",
    "bogus",
    "GET",
    "quit",
    "",
];
/// The argument tokens it picks from: valid and invalid values.
const TOKENS: &[&str] = &[
    "k",
    "k2",
    "n",
    "0",
    "1",
    "2",
    "5",
    "-1",
    "abc",
    "4294967296",
    "18446744073709551616",
    "999999999",
    "noreply",
    "v",
    "k",
    "s",
    "f",
    "h",
    "q",
    "O123",
    "T1000",
    "N500",
    "R30",
    "I",
    "MA",
    "MP",
    "ME",
    "MR",
    "MS",
    "MX",
    "MI",
    "MD",
    "D3",
    "J7",
    "F5",
    "E9",
    "b",
    "Zm9v",
    "C999999999",
    "x\u{1}y",
];

/// One generated text or meta request: a verb, argument tokens from a pool of valid and
/// invalid values, and for storage commands a data block of the declared length or not.
fn generated_request(rng: &mut Rng) -> Vec<u8> {
    let verb = rng.pick(VERBS);
    let mut line = verb.to_string();
    for _ in 0..rng.next() % 6 {
        line.push(' ');
        line.push_str(rng.pick(TOKENS));
    }
    if rng.next().is_multiple_of(16) {
        line.push_str("   ");
    }
    // Now and then a line longer than memcached's 2048-byte limit, which closes the connection.
    // (Not for retrieval lines: there memcached answers the too-long key after dropping every
    // reply still queued for the connection, which tierkv deliberately does not copy.)
    if rng.next().is_multiple_of(64) && !matches!(verb, "get" | "gat") {
        line.push(' ');
        line.push_str(&"x".repeat(2100));
    }
    // A delayed flush_all makes the rest of the run depend on where second boundaries fall.
    if verb == "flush_all" {
        line = line
            .split(' ')
            .map(|t| if t.parse::<i64>().is_ok_and(|n| n > 0) { "0" } else { t })
            .collect::<Vec<_>>()
            .join(" ");
    }
    let mut request = line.clone().into_bytes();
    request.extend_from_slice(if rng.next().is_multiple_of(12) { b"\n" } else { b"\r\n" });
    let storage = matches!(verb, "set" | "add" | "replace" | "append" | "prepend" | "cas" | "ms");
    if storage {
        // The declared length is the last numeric token memcached reads; send that many bytes,
        // or a few more or fewer now and then.
        let declared: usize = line.split(' ').filter_map(|t| t.parse::<usize>().ok()).find(|&n| n < 100).unwrap_or(1);
        let length = match rng.next() % 8 {
            0 => declared + 2,
            1 => declared.saturating_sub(1),
            _ => declared,
        };
        request.extend(std::iter::repeat_n(b'd', length));
        request.extend_from_slice(b"\r\n");
    }
    request
}

#[test]
fn a_generated_corpus_gets_the_same_replies_from_both() {
    // Cache mode, then store mode: the operations mean the same in both.
    for mode in ["cache", "store"] {
        a_generated_corpus_gets_the_same_replies_from_both_in(mode);
    }
}

fn a_generated_corpus_gets_the_same_replies_from_both_in(mode: &str) {
    let (ours, theirs) = (tierkv_with(&["--mode", mode]), memcached());
    let mut scripts = Vec::new();
    for seed in [0x7E57_C0DE_2026_1122, 0x1234_5678_9ABC_DEF1, 0xDEAD_BEEF_0BAD_F00D] {
        let mut rng = Rng(seed);
        for _ in 0..2500 {
            let script: Vec<u8> = (0..1 + rng.next() % 6).flat_map(|_| generated_request(&mut rng)).collect();
            scripts.push(script);
        }
    }
    if let Some(path) = std::env::var_os("DUMP_CORPUS") {
        let text: Vec<String> = scripts.iter().map(|s| format!("{:?}", s)).collect();
        std::fs::write(path, text.join("\n")).unwrap();
    }
    // Each script on a fresh connection, both servers seeing the same sequence.
    let mut differences = Vec::new();
    for script in &scripts {
        let (mine, reference) = (exchange_to_sentinel(ours.1, script), exchange_to_sentinel(theirs.1, script));
        let finished = |reply: &[u8]| reply.windows(6).any(|w| w == b" O7u5k");
        // A server still swallowing a value it refused has not answered the sentinel yet. Then
        // memcached holds back every reply; tierkv sends the ones before the refused request
        // (the byte stream is the same once the value has been sent).
        let same = match (finished(&mine), finished(&reference)) {
            (true, true) => mine == reference,
            (false, false) => mine.starts_with(&reference),
            _ => false,
        };
        if !same {
            differences.push(format!(
                "request {:?}\n   memcached {:?}\n   tierkv    {:?}",
                String::from_utf8_lossy(script),
                String::from_utf8_lossy(&reference),
                String::from_utf8_lossy(&mine)
            ));
        }
    }
    assert!(
        differences.is_empty(),
        "{} of {} scripts differ:\n{}",
        differences.len(),
        scripts.len(),
        differences.join("\n")
    );
}

/// One generated well-formed binary request: an opcode memcached answers (quiet variants
/// included), keys from a small set plus empty and 251-byte ones, the opcode's extras, values for
/// the storage opcodes, now and then a CAS that matches nothing. (Malformed binary requests are
/// covered by the hand-written scripts: memcached answers most with EINVAL and closes, as tierkv
/// does, but some of its answers depend on its internal reference counts.)
fn generated_binary_request(rng: &mut Rng) -> Vec<u8> {
    use tierkv_protocol::binary::opcode::*;
    const OPCODES: &[u8] = &[
        GET,
        GETQ,
        GETK,
        GETKQ,
        SET,
        SETQ,
        ADD,
        ADDQ,
        REPLACE,
        REPLACEQ,
        DELETE,
        DELETEQ,
        INCREMENT,
        INCREMENTQ,
        DECREMENT,
        DECREMENTQ,
        APPEND,
        APPENDQ,
        PREPEND,
        PREPENDQ,
        TOUCH,
        GAT,
        GATQ,
        GATK,
        GATKQ,
        FLUSH,
        FLUSHQ,
        NOOP,
        QUIT,
        QUITQ,
        SASL_LIST_MECHS,
    ];
    let op = OPCODES[(rng.next() % OPCODES.len() as u64) as usize];
    let keyless = matches!(op, FLUSH | FLUSHQ | NOOP | QUIT | QUITQ | SASL_LIST_MECHS);
    let key: Vec<u8> = match rng.next() % 10 {
        _ if keyless => Vec::new(),
        0 => b"k".to_vec(),
        1 => vec![b'k'; 251],
        n => format!("k{}", n % 4).into_bytes(),
    };
    let right_extras: Vec<u8> = match op {
        SET | SETQ | ADD | ADDQ | REPLACE | REPLACEQ => [5u32.to_be_bytes(), 1000u32.to_be_bytes()].concat(),
        INCREMENT | INCREMENTQ | DECREMENT | DECREMENTQ => {
            let expiry = if rng.next().is_multiple_of(2) { u32::MAX } else { 1000 };
            [3u64.to_be_bytes().as_slice(), &7u64.to_be_bytes(), &expiry.to_be_bytes()].concat()
        }
        TOUCH | GAT | GATQ | GATK | GATKQ => 1000u32.to_be_bytes().to_vec(),
        FLUSH | FLUSHQ if rng.next().is_multiple_of(2) => 0u32.to_be_bytes().to_vec(),
        _ => Vec::new(),
    };
    let extras = right_extras;
    let takes_value =
        matches!(op, SET | SETQ | ADD | ADDQ | REPLACE | REPLACEQ | APPEND | APPENDQ | PREPEND | PREPENDQ);
    let value: Vec<u8> = match rng.next() % 6 {
        _ if !takes_value => Vec::new(),
        0 => Vec::new(),
        1 => b"12".to_vec(),
        2 => b"x".to_vec(),
        _ => vec![b'v'; (rng.next() % 40) as usize],
    };
    let cas = if rng.next().is_multiple_of(6) { 999_999_999 } else { 0 };
    let mut request = Vec::new();
    tierkv_protocol::binary::write_request(&mut request, op, rng.next() as u32, cas, &extras, &key, &value);
    request
}

#[test]
fn a_generated_binary_corpus_gets_the_same_replies_from_both() {
    // Cache mode, then store mode: the operations mean the same in both.
    for mode in ["cache", "store"] {
        a_generated_binary_corpus_gets_the_same_replies_from_both_in(mode);
    }
}

fn a_generated_binary_corpus_gets_the_same_replies_from_both_in(mode: &str) {
    let (ours, theirs) = (tierkv_with(&["--mode", mode]), memcached());
    let mut differences = Vec::new();
    let mut scripts = Vec::new();
    for seed in [0xB17A_2026_1122, 0x1111_2222_3333_4444] {
        let mut rng = Rng(seed);
        for _ in 0..3000 {
            scripts.push((0..1 + rng.next() % 5).flat_map(|_| generated_binary_request(&mut rng)).collect::<Vec<u8>>());
        }
    }
    for script in scripts {
        let mine = mask_cas(exchange_binary_to_sentinel(ours.1, &script));
        let reference = mask_cas(exchange_binary_to_sentinel(theirs.1, &script));
        if mine != reference {
            differences.push(format!("request {script:02x?}\n   memcached {reference:02x?}\n   tierkv    {mine:02x?}"));
        }
    }
    assert!(differences.is_empty(), "{} of 6000 scripts differ:\n{}", differences.len(), differences.join("\n"));
}
