//! tierkv's own meta commands (docs/protocol-extensions.md): `mx`, an atomic on a counter, and
//! `mv`, a vector command. Their arguments come first, as `ms`'s data length does, then meta
//! flags: those that mean something for them (`b`, `k`, `O`, `q`; `v` and `p` for `mx`; `T`
//! and `F` for `mv new`). Any other flag is refused, so nothing a client sends is silently
//! ignored.
//!
//! ```text
//! mx <key> <op> <type> <operand> [<operand2>] <flags>*\r\n
//! mv <key> new <type> <length> <flags>*\r\n
//! mv <key> upd <op> <type> <offset> <bytes> <flags>*\r\n<data>\r\n
//! mv <key> get <offset> <count> <flags>*\r\n
//! mv <key> len <flags>*\r\n
//! ```

use super::{rest_after, Line, BAD_FORMAT, MAX_TOKENS};
use crate::meta::{parse_flags_allowing, MetaFlags, MAX_OPAQUE_BYTES};
use crate::{atomic, vector, Command, Decoded, ErrorReply, Limits, ProtocolError, ReplyStyle, Request, VectorCall};

/// The flags `mx` takes.
const ATOMIC_FLAGS: &[u8] = b"bkOqvp";
/// The flags `mv` takes; `new` also takes `T` and `F`.
const VECTOR_FLAGS: &[u8] = b"bkOq";
const VECTOR_NEW_FLAGS: &[u8] = b"bkOqTF";

impl<'a> Line<'a> {
    /// Meta flags of an extension command: memcached's checks, then only `allowed` letters.
    fn extension_flags(&self, tokens: &'a [u8], allowed: &[u8]) -> Result<MetaFlags<'a>, &'static str> {
        let flags = parse_flags_allowing(tokens, b"p")?;
        if flags.iter().any(|token| !allowed.contains(&token[0])) {
            return Err("invalid flag");
        }
        if flags.opaque().is_some_and(|o| o.len() + 1 > MAX_OPAQUE_BYTES) {
            return Err("opaque token too long");
        }
        Ok(flags)
    }

    fn meta_request(&self, command: Command<'a>, flags: MetaFlags<'a>, consumed: usize) -> Decoded<'a> {
        Decoded::Request { request: Request { command, style: ReplyStyle::Meta(flags) }, consumed }
    }

    /// `mx`: tierkv's atomic (`crate::atomic`) with meta flags.
    pub(super) fn meta_atomic(&self, limits: &Limits) -> Decoded<'a> {
        let (tokens, count) = self.tokens();
        if count < 2 {
            return self.error(ErrorReply::Error);
        }
        let args = &tokens[1..count.min(MAX_TOKENS)];
        if args.len() < 4 {
            return self.client_error(BAD_FORMAT, false);
        }
        let (line, used) = match atomic::parse_args(args, limits.max_key_bytes) {
            Ok(parsed) => parsed,
            Err(message) => return self.client_error(message, false),
        };
        if count > MAX_TOKENS || count - 1 - used > limits.max_meta_flags {
            return self.client_error("options flags too long", false);
        }
        let flags = match self.extension_flags(rest_after(self.bytes, 1 + used), ATOMIC_FLAGS) {
            Ok(flags) => flags,
            Err(message) => return self.client_error(message, false),
        };
        let key = match self.meta_key(line.key, flags.base64(), limits) {
            Ok(key) => key,
            Err(decoded) => return decoded,
        };
        let command = Command::Atomic {
            key,
            code: line.code,
            signed: line.signed,
            operand: line.operand,
            operand2: line.operand2,
        };
        self.meta_request(command, flags, self.consumed)
    }

    /// `mv`: tierkv's vector commands (`crate::vector`) with meta flags.
    pub(super) fn meta_vector(&self, input: &'a [u8], limits: &Limits) -> Decoded<'a> {
        let (tokens, count) = self.tokens();
        if count < 2 {
            return self.error(ErrorReply::Error);
        }
        if count < 3 || tokens[1].len() > limits.max_key_bytes {
            return self.client_error(BAD_FORMAT, false);
        }
        let (verb, args): (&[u8], usize) = match tokens[2] {
            b"new" => (b"vnew", 2),
            b"upd" => (b"vupd", 4),
            b"get" => (b"vget", 2),
            b"len" => (b"vlen", 0),
            _ => return self.client_error("unknown vector command", false),
        };
        if count < 3 + args {
            return self.client_error(BAD_FORMAT, false);
        }
        // The text grammar's parser reads `<verb> <key> <args>`.
        let mut parts: [&[u8]; 6] = [verb, tokens[1], &[], &[], &[], &[]];
        parts[2..2 + args].copy_from_slice(&tokens[3..3 + args]);
        let (call, length) = match vector::parse(&parts[..2 + args]) {
            Ok(parsed) => parsed,
            Err(message) => return self.client_error(message, false),
        };
        // Once the data length is known, an error swallows the data block, as `ms`'s do.
        let data_end = self.consumed + if verb == b"vupd" { length + 2 } else { 0 };
        let refuse = |message| Decoded::Error(ProtocolError::new(ErrorReply::Client(message), data_end));
        if count > MAX_TOKENS || count - 3 - args > limits.max_meta_flags {
            return refuse("options flags too long");
        }
        let allowed = if verb == b"vnew" { VECTOR_NEW_FLAGS } else { VECTOR_FLAGS };
        let flags = match self.extension_flags(rest_after(self.bytes, 3 + args), allowed) {
            Ok(flags) => flags,
            Err(message) => return refuse(message),
        };
        let key = match self.meta_key(tokens[1], flags.base64(), limits) {
            Ok(key) => key,
            Err(_) => return refuse("error decoding key"),
        };
        let call = match call {
            VectorCall::Update { op, elem, offset, .. } => {
                match self.data_block(input, length, length <= limits.max_value_bytes, None, false) {
                    Ok(data) => VectorCall::Update { op, elem, offset, data },
                    Err(decoded) => return decoded,
                }
            }
            other => other,
        };
        let command =
            Command::Vector { key, call, flags: flags.client_flags().unwrap_or(0), exptime: flags.ttl().unwrap_or(0) };
        self.meta_request(command, flags, data_end)
    }
}

#[cfg(test)]
mod tests {
    use crate::text::decode_request;
    use crate::{
        AtomicCode, Command, Decoded, ErrorReply, Key, Limits, ReplyStyle, VectorCall, VectorElem, VectorOpCode,
    };

    fn decode(input: &[u8]) -> Decoded<'_> {
        decode_request(input, &Limits::default())
    }

    fn error(input: &[u8]) -> (String, usize) {
        match decode(input) {
            Decoded::Error(e) => match e.reply {
                ErrorReply::Client(message) => (message.to_string(), e.skip),
                other => (format!("{other:?}"), e.skip),
            },
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn mx_reads_the_atomic_then_its_flags() {
        let input = b"mx k cas i64 -1 7 O12 v p q\r\n";
        let Decoded::Request { request, consumed } = decode(input) else { panic!() };
        assert_eq!(consumed, input.len());
        let Command::Atomic { key, code, signed, operand, operand2 } = request.command else { panic!() };
        assert_eq!((key, code, signed, operand as i64, operand2), (Key::plain(b"k"), AtomicCode::Cas, true, -1, 7));
        let ReplyStyle::Meta(flags) = request.style else { panic!() };
        assert!(flags.quiet() && flags.return_value() && flags.has(b'p') && flags.opaque() == Some(&b"12"[..]));
        let Decoded::Request { request, .. } = decode(b"mx aGk= add u64 5 b\r\n") else { panic!() };
        assert!(matches!(request.command, Command::Atomic { key: Key { raw: b"aGk=", base64: true }, .. }));
    }

    #[test]
    fn mx_refuses_clearly() {
        assert_eq!(error(b"mx\r\n").0, "Error");
        assert_eq!(error(b"mx k add u64\r\n").0, "bad command line format");
        assert_eq!(error(b"mx k cas u64 1\r\n").0, "bad command line format");
        assert_eq!(error(b"mx k mul u64 1\r\n").0, "unknown atomic operation");
        assert_eq!(error(b"mx k add f32 1\r\n").0, "atomic type must be u64 or i64");
        assert_eq!(error(b"mx k max u64 -1\r\n").0, "invalid numeric operand");
        assert_eq!(error(b"mx k add u64 1 T30\r\n").0, "invalid flag", "a flag mx would ignore is refused");
        assert_eq!(error(b"mx k add u64 1 v v\r\n").0, "duplicate flag");
        assert_eq!(error(b"mx k add u64 1 7\r\n").0, "invalid flag", "a second operand for add is a flag");
        assert_eq!(error(b"mx !! add u64 1 b\r\n").0, "error decoding key");
        let long = format!("mx k add u64 1 O{}\r\n", "1".repeat(40));
        assert_eq!(error(long.as_bytes()).0, "opaque token too long");
        let many = format!("mx k add u64 1{}\r\n", " q".repeat(18));
        assert_eq!(error(many.as_bytes()).0, "options flags too long");
    }

    #[test]
    fn mv_reads_each_subcommand() {
        let Decoded::Request { request, .. } = decode(b"mv k new f32 8 T60 F3 q\r\n") else { panic!() };
        assert_eq!(
            request.command,
            Command::Vector {
                key: Key::plain(b"k"),
                call: VectorCall::New { elem: VectorElem::F32, len: 8 },
                flags: 3,
                exptime: 60
            }
        );
        let input = b"mv k upd add i64 2 8 O1\r\n\x01\x00\x00\x00\x00\x00\x00\x00\r\nmn\r\n";
        let Decoded::Request { request, consumed } = decode(input) else { panic!() };
        assert_eq!(consumed, input.len() - 4);
        let Command::Vector { call: VectorCall::Update { op, elem, offset, data }, .. } = request.command else {
            panic!()
        };
        assert_eq!((op, elem, offset, data), (VectorOpCode::Add, VectorElem::I64, 2, &[1, 0, 0, 0, 0, 0, 0, 0][..]));
        assert!(matches!(decode(b"mv k upd add i64 2 8\r\n\x01"), Decoded::Incomplete { needed: 32 }));
        let Decoded::Request { request, .. } = decode(b"mv k get 1 2 k\r\n") else { panic!() };
        assert!(matches!(request.command, Command::Vector { call: VectorCall::Get { offset: 1, count: 2 }, .. }));
        let Decoded::Request { request, .. } = decode(b"mv k len\r\n") else { panic!() };
        assert!(matches!(request.command, Command::Vector { call: VectorCall::Len, .. }));
    }

    #[test]
    fn mv_refuses_clearly_and_swallows_known_data() {
        assert_eq!(error(b"mv k\r\n").0, "bad command line format");
        assert_eq!(error(b"mv k mul\r\n").0, "unknown vector command");
        assert_eq!(error(b"mv k new f16 8\r\n").0, "vector type must be i64, u64, f64 or f32");
        assert_eq!(error(b"mv k get 1\r\n").0, "bad command line format");
        assert_eq!(error(b"mv k get 1 2 T5\r\n").0, "invalid flag", "only new takes a TTL");
        let line = b"mv k upd add i64 0 8 z\r\n";
        assert_eq!(error(line), ("invalid flag".to_string(), line.len() + 10), "the data block is swallowed");
        assert_eq!(error(b"mv k upd pow i64 0 8\r\n").0, "unknown vector operation");
    }
}
