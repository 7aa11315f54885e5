//! Property tests: random requests of all three protocols encode (client side), decode (server
//! side) to the same request, and re-encode to the same bytes; every proper prefix of a valid
//! request or reply decodes as "incomplete", never as an error or a panic.

use proptest::prelude::*;
use tierkv_protocol::binary::{self, opcode};
use tierkv_protocol::client::{binary_info, decode_reply, encode_request, ReplyDecoded};
use tierkv_protocol::meta::MetaFlags;
use tierkv_protocol::reply::{self, MetaCode, MetaReturn, Status};
use tierkv_protocol::*;

fn limits() -> Limits {
    Limits::default()
}

fn text_key() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(b'!'..=b'~', 1..=250)
}

fn any_key() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 1..=250)
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..300)
}

fn store_mode() -> impl Strategy<Value = StoreMode> {
    prop_oneof![
        Just(StoreMode::Set),
        Just(StoreMode::Add),
        Just(StoreMode::Replace),
        Just(StoreMode::Append),
        Just(StoreMode::Prepend),
        Just(StoreMode::Cas)
    ]
}

/// An owned text request that borrows into a `Request`.
#[derive(Clone, Debug)]
enum Text {
    Get { keys: Vec<u8>, return_cas: bool, touch: Option<i32> },
    Store { mode: StoreMode, key: Vec<u8>, flags: u32, exptime: i32, value: Vec<u8>, cas: u64, noreply: bool },
    Delete { key: Vec<u8>, noreply: bool },
    Arith { key: Vec<u8>, delta: u64, decrement: bool, noreply: bool },
    Atomic { key: Vec<u8>, code: AtomicCode, signed: bool, operand: u64, operand2: u64, noreply: bool },
    Touch { key: Vec<u8>, exptime: i32, noreply: bool },
    Flush { delay: i32, noreply: bool },
    Verbosity { level: u32, noreply: bool },
    Stats { args: Vec<u8> },
    Version,
    Quit,
}

fn text_request() -> impl Strategy<Value = Text> {
    prop_oneof![
        (proptest::collection::vec(text_key(), 1..6), any::<bool>(), proptest::option::of(any::<i32>()))
            .prop_map(|(keys, return_cas, touch)| Text::Get { keys: keys.join(&b' '), return_cas, touch }),
        (store_mode(), text_key(), any::<u32>(), any::<i32>(), value(), any::<u64>(), any::<bool>()).prop_map(
            |(mode, key, flags, exptime, value, cas, noreply)| {
                let cas = if mode == StoreMode::Cas { cas } else { 0 };
                Text::Store { mode, key, flags, exptime, value, cas, noreply }
            }
        ),
        (text_key(), any::<bool>()).prop_map(|(key, noreply)| Text::Delete { key, noreply }),
        (text_key(), any::<u64>(), any::<bool>(), any::<bool>())
            .prop_map(|(key, delta, decrement, noreply)| Text::Arith { key, delta, decrement, noreply }),
        (
            text_key(),
            proptest::sample::select(vec![
                AtomicCode::Add,
                AtomicCode::Cas,
                AtomicCode::Min,
                AtomicCode::Max,
                AtomicCode::And,
                AtomicCode::Or,
                AtomicCode::Xor
            ]),
            any::<bool>(),
            any::<u64>(),
            any::<u64>(),
            any::<bool>()
        )
            .prop_map(|(key, code, signed, operand, operand2, noreply)| {
                let operand2 = if code == AtomicCode::Cas { operand2 } else { 0 };
                Text::Atomic { key, code, signed, operand, operand2, noreply }
            }),
        (text_key(), any::<i32>(), any::<bool>()).prop_map(|(key, exptime, noreply)| Text::Touch {
            key,
            exptime,
            noreply
        }),
        (any::<i32>(), any::<bool>()).prop_map(|(delay, noreply)| Text::Flush { delay, noreply }),
        (any::<u32>(), any::<bool>()).prop_map(|(level, noreply)| Text::Verbosity { level, noreply }),
        prop_oneof![
            Just(b"".to_vec()),
            Just(b"settings".to_vec()),
            Just(b"slabs".to_vec()),
            Just(b"detail dump".to_vec())
        ]
        .prop_map(|args| Text::Stats { args }),
        Just(Text::Version),
        Just(Text::Quit),
    ]
}

impl Text {
    fn request(&self) -> Request<'_> {
        let (command, noreply) = match self {
            Text::Get { keys, return_cas, touch } => (
                Command::Get {
                    keys: Keys::from_line(keys),
                    return_cas: *return_cas,
                    touch: touch.map(i64::from),
                    base64: false,
                },
                false,
            ),
            Text::Store { mode, key, flags, exptime, value, cas, noreply } => (
                Command::Store {
                    mode: *mode,
                    key: Key::plain(key),
                    flags: *flags,
                    exptime: i64::from(*exptime),
                    value,
                    cas: *cas,
                },
                *noreply,
            ),
            Text::Delete { key, noreply } => (Command::Delete { key: Key::plain(key), cas: 0 }, *noreply),
            Text::Arith { key, delta, decrement, noreply } => (
                Command::Arith { key: Key::plain(key), delta: *delta, decrement: *decrement, initial: None, cas: 0 },
                *noreply,
            ),
            Text::Atomic { key, code, signed, operand, operand2, noreply } => (
                Command::Atomic {
                    key: Key::plain(key),
                    code: *code,
                    signed: *signed,
                    operand: *operand,
                    operand2: *operand2,
                },
                *noreply,
            ),
            Text::Touch { key, exptime, noreply } => {
                (Command::Touch { key: Key::plain(key), exptime: i64::from(*exptime) }, *noreply)
            }
            Text::Flush { delay, noreply } => (Command::FlushAll { delay: i64::from(*delay) }, *noreply),
            Text::Verbosity { level, noreply } => (Command::Verbosity { level: *level }, *noreply),
            Text::Stats { args } => (Command::Stats { args }, false),
            Text::Version => (Command::Version, false),
            Text::Quit => (Command::Quit, false),
        };
        Request { command, style: ReplyStyle::Text { noreply } }
    }
}

/// An owned binary request.
#[derive(Clone, Debug)]
struct Binary {
    op: u8,
    opaque: u32,
    key: Vec<u8>,
    value: Vec<u8>,
    flags: u32,
    exptime: u32,
    cas: u64,
    delta: u64,
    initial: Option<(u64, u32)>,
}

fn binary_request() -> impl Strategy<Value = Binary> {
    use opcode::*;
    let ops = [
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
        APPEND,
        APPENDQ,
        PREPEND,
        PREPENDQ,
        DELETE,
        DELETEQ,
        INCREMENT,
        INCREMENTQ,
        DECREMENT,
        DECREMENTQ,
        QUIT,
        QUITQ,
        FLUSH,
        FLUSHQ,
        NOOP,
        VERSION,
        STAT,
        TOUCH,
        GAT,
        GATQ,
        GATK,
        GATKQ,
        SASL_LIST_MECHS,
        SASL_AUTH,
        SASL_STEP,
    ];
    (
        proptest::sample::select(ops.to_vec()),
        any::<u32>(),
        any_key(),
        value(),
        any::<u32>(),
        any::<u32>(),
        prop_oneof![Just(0u64), any::<u64>()],
        any::<u64>(),
        proptest::option::of((any::<u64>(), 0..u32::MAX)),
    )
        .prop_map(|(op, opaque, key, value, flags, exptime, cas, delta, initial)| Binary {
            op,
            opaque,
            key,
            value,
            flags,
            exptime,
            cas,
            delta,
            initial,
        })
}

impl Binary {
    fn request(&self) -> Request<'_> {
        use opcode::*;
        let key = Key::plain(&self.key);
        let exptime = i64::from(self.exptime);
        let command = match self.op {
            GET | GETQ | GETK | GETKQ => {
                Command::Get { keys: Keys::one(&self.key), return_cas: true, touch: None, base64: false }
            }
            GAT | GATQ | GATK | GATKQ => {
                Command::Get { keys: Keys::one(&self.key), return_cas: true, touch: Some(exptime), base64: false }
            }
            SET | SETQ | ADD | ADDQ | REPLACE | REPLACEQ => {
                let mode = match self.op {
                    _ if self.cas != 0 => StoreMode::Cas,
                    SET | SETQ => StoreMode::Set,
                    ADD | ADDQ => StoreMode::Add,
                    _ => StoreMode::Replace,
                };
                Command::Store { mode, key, flags: self.flags, exptime, value: &self.value, cas: self.cas }
            }
            APPEND | APPENDQ | PREPEND | PREPENDQ => {
                let mode = if matches!(self.op, APPEND | APPENDQ) { StoreMode::Append } else { StoreMode::Prepend };
                Command::Store { mode, key, flags: 0, exptime: 0, value: &self.value, cas: self.cas }
            }
            DELETE | DELETEQ => Command::Delete { key, cas: self.cas },
            INCREMENT | INCREMENTQ | DECREMENT | DECREMENTQ => Command::Arith {
                key,
                delta: self.delta,
                decrement: matches!(self.op, DECREMENT | DECREMENTQ),
                initial: self.initial.map(|(value, exptime)| ArithInitial { value, exptime: i64::from(exptime) }),
                cas: self.cas,
            },
            QUIT | QUITQ => Command::Quit,
            FLUSH | FLUSHQ => Command::FlushAll { delay: exptime },
            NOOP => Command::Noop,
            VERSION => Command::Version,
            STAT => Command::Stats { args: &self.key },
            TOUCH => Command::Touch { key, exptime },
            SASL_LIST_MECHS => Command::Sasl { opcode: self.op, key: b"", value: b"" },
            _ => Command::Sasl { opcode: self.op, key: &self.key, value: &self.value },
        };
        Request { command, style: ReplyStyle::Binary(binary_info(self.op, self.opaque)) }
    }
}

/// Meta flag tokens that decode (no `b`: keys here are not base64).
fn meta_tokens() -> impl Strategy<Value = Vec<u8>> {
    let token = prop_oneof![
        proptest::sample::select(b"vstcfklhquI".to_vec()).prop_map(|letter| vec![letter]),
        (proptest::sample::select(b"TNR".to_vec()), any::<i32>())
            .prop_map(|(l, n)| format!("{}{n}", l as char).into_bytes()),
        (proptest::sample::select(b"CJD".to_vec()), any::<u64>())
            .prop_map(|(l, n)| format!("{}{n}", l as char).into_bytes()),
        any::<u32>().prop_map(|n| format!("F{n}").into_bytes()),
        proptest::collection::vec(b'!'..=b'~', 0..30).prop_map(|o| [b"O".to_vec(), o].concat()),
    ];
    proptest::collection::vec(token, 0..10).prop_map(|tokens| {
        let mut seen = std::collections::HashSet::new();
        let unique: Vec<Vec<u8>> = tokens.into_iter().filter(|t| seen.insert(t[0])).collect();
        unique.join(&b' ')
    })
}

fn meta_line() -> impl Strategy<Value = Vec<u8>> {
    (
        prop_oneof![Just("mg"), Just("ms"), Just("md"), Just("ma")],
        text_key(),
        meta_tokens(),
        value(),
        proptest::option::of(proptest::sample::select(b"SEAPR".to_vec())),
    )
        .prop_map(|(command, key, tokens, value, mode)| {
            let mut line = command.as_bytes().to_vec();
            line.push(b' ');
            line.extend_from_slice(&key);
            if command == "ms" {
                line.extend_from_slice(format!(" {}", value.len()).as_bytes());
            }
            if !tokens.is_empty() {
                line.push(b' ');
                line.extend_from_slice(&tokens);
            }
            if let (Some(mode), "ms") = (mode, command) {
                line.extend_from_slice(&[b' ', b'M', mode]);
            }
            line.extend_from_slice(b"\r\n");
            if command == "ms" {
                line.extend_from_slice(&value);
                line.extend_from_slice(b"\r\n");
            }
            line
        })
}

fn decode_whole(bytes: &[u8]) -> Request<'_> {
    match decode_request(bytes, &limits()) {
        Decoded::Request { request, consumed } => {
            assert_eq!(consumed, bytes.len());
            request
        }
        other => panic!("{:?} -> {other:?}", String::from_utf8_lossy(bytes)),
    }
}

fn assert_prefixes_incomplete(bytes: &[u8]) {
    for end in 0..bytes.len() {
        let decoded = decode_request(&bytes[..end], &limits());
        assert!(
            matches!(decoded, Decoded::Incomplete { .. }),
            "prefix {end} of {:?} -> {decoded:?}",
            String::from_utf8_lossy(bytes)
        );
    }
}

/// encode -> decode gives the same request, which re-encodes to the same bytes, and every
/// proper prefix of those bytes is incomplete.
fn check_round_trip(original: &Request<'_>) {
    let mut bytes = Vec::new();
    encode_request(&mut bytes, original);
    let decoded = decode_whole(&bytes);
    assert_eq!(&decoded, original);
    let mut again = Vec::new();
    encode_request(&mut again, &decoded);
    assert_eq!(again, bytes);
    assert_prefixes_incomplete(&bytes);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn text_requests_round_trip(text in text_request()) {
        check_round_trip(&text.request());
    }

    #[test]
    fn binary_requests_round_trip(binary in binary_request()) {
        check_round_trip(&binary.request());
    }

    #[test]
    fn meta_requests_round_trip(line in meta_line()) {
        let decoded = decode_whole(&line);
        let ReplyStyle::Meta(_) = decoded.style else { panic!("not meta") };
        let mut again = Vec::new();
        encode_request(&mut again, &decoded);
        prop_assert_eq!(&again, &line);
        assert_prefixes_incomplete(&line);
    }

    #[test]
    fn replies_round_trip(key in text_key(), data in value(), flags in any::<u32>(), cas in proptest::option::of(any::<u64>()), number in any::<u64>()) {
        let mut bytes = Vec::new();
        reply::value(&mut bytes, &key, flags, &data, cas);
        reply::status(&mut bytes, Status::End);
        reply::number(&mut bytes, number);
        let meta_flags = MetaFlags::default();
        reply::meta(&mut bytes, MetaCode::Va, &meta_flags, b"", &MetaReturn::default(), Some(&data));
        binary::write_response(&mut bytes, &binary_info(opcode::GETK, 1), 0, cas.unwrap_or(0), &flags.to_be_bytes(), &key, &data);
        let mut at = 0;
        let mut replies = Vec::new();
        while at < bytes.len() {
            match decode_reply(&bytes[at..], &limits()) {
                ReplyDecoded::Reply { reply, consumed } => {
                    replies.push(format!("{reply:?}"));
                    for end in 0..consumed {
                        let partial = decode_reply(&bytes[at..at + end], &limits());
                        prop_assert!(matches!(partial, ReplyDecoded::Incomplete { .. }), "{:?}", partial);
                    }
                    at += consumed;
                }
                other => panic!("{other:?}"),
            }
        }
        prop_assert_eq!(replies.len(), 5);
        let value_reply = client::Reply::Value { key: &key, flags, data: &data, cas };
        prop_assert_eq!(&replies[0], &format!("{value_reply:?}"));
        prop_assert_eq!(&replies[2], &format!("{:?}", client::Reply::Number(number)));
    }
}
