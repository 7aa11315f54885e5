//! tierkv's vector commands on the wire (docs/protocol-extensions.md). Pure functions over bytes.
//!
//! ```text
//! vnew <key> <type> <length> [noreply]\r\n                           STORED
//! vupd <key> <op> <type> <offset> <bytes> [noreply]\r\n<data>\r\n    OK | NOT_FOUND
//! vget <key> <offset> <count>\r\n                                    VALUE <key> 0 <bytes>\r\n<data>\r\nEND
//! vlen <key>\r\n                                                     VECTOR <type> <length>
//!   type: i64 | u64 | f64 | f32     op: add | min | max | set
//!   data: little-endian elements of the type
//! ```

use crate::request::{VectorCall, VectorElem, VectorOpCode};

const TYPES: [(&[u8], VectorElem); 4] =
    [(b"i64", VectorElem::I64), (b"u64", VectorElem::U64), (b"f64", VectorElem::F64), (b"f32", VectorElem::F32)];
const OPS: [(&[u8], VectorOpCode); 4] = [
    (b"add", VectorOpCode::Add),
    (b"min", VectorOpCode::Min),
    (b"max", VectorOpCode::Max),
    (b"set", VectorOpCode::Set),
];

/// The element type's name on the wire.
pub fn type_name(elem: VectorElem) -> &'static [u8] {
    TYPES.iter().find(|(_, e)| *e == elem).expect("every type has a name").0
}

/// The operation's name on the wire.
pub fn op_name(op: VectorOpCode) -> &'static [u8] {
    OPS.iter().find(|(_, o)| *o == op).expect("every op has a name").0
}

fn elem(token: &[u8]) -> Result<VectorElem, &'static str> {
    TYPES.iter().find(|(name, _)| *name == token).map(|(_, e)| *e).ok_or("vector type must be i64, u64, f64 or f32")
}

fn number(token: &[u8]) -> Result<u32, &'static str> {
    std::str::from_utf8(token)
        .ok()
        .filter(|t| t.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|t| t.parse().ok())
        .ok_or("bad command line format")
}

/// A vector line's call, and for `vupd` the data length still to read; errors are CLIENT_ERROR
/// messages. `tokens` start with the verb and end before any `noreply`.
pub fn parse(tokens: &[&[u8]]) -> Result<(VectorCall<'static>, usize), &'static str> {
    let args = &tokens[1..];
    match (tokens[0], args.len()) {
        (b"vnew", 3) => Ok((VectorCall::New { elem: elem(args[1])?, len: number(args[2])? }, 0)),
        (b"vupd", 5) => {
            let op =
                OPS.iter().find(|(name, _)| *name == args[1]).map(|(_, o)| *o).ok_or("unknown vector operation")?;
            let bytes = number(args[4])? as usize;
            Ok((VectorCall::Update { op, elem: elem(args[2])?, offset: number(args[3])?, data: &[] }, bytes))
        }
        (b"vget", 3) => Ok((VectorCall::Get { offset: number(args[1])?, count: number(args[2])? }, 0)),
        (b"vlen", 1) => Ok((VectorCall::Len, 0)),
        _ => Err("bad command line format"),
    }
}

/// Appends a vector request line (and for `vupd` its data block).
pub fn write_request(out: &mut Vec<u8>, key: &[u8], call: &VectorCall<'_>, noreply: bool) {
    write(out, key, call, None, noreply);
}

/// Appends an `mv` request line with its meta `flags` (and for `upd` its data block).
pub fn write_meta_request(out: &mut Vec<u8>, key: &[u8], call: &VectorCall<'_>, flags: &[u8]) {
    write(out, key, call, Some(flags), false);
}

fn write(out: &mut Vec<u8>, key: &[u8], call: &VectorCall<'_>, meta: Option<&[u8]>, noreply: bool) {
    let (verb, sub): (&[u8], &[u8]) = match call {
        VectorCall::New { .. } => (b"vnew", b"new"),
        VectorCall::Update { .. } => (b"vupd", b"upd"),
        VectorCall::Get { .. } => (b"vget", b"get"),
        VectorCall::Len => (b"vlen", b"len"),
    };
    if meta.is_some() {
        out.extend_from_slice(b"mv ");
        out.extend_from_slice(key);
        out.push(b' ');
        out.extend_from_slice(sub);
    } else {
        out.extend_from_slice(verb);
        out.push(b' ');
        out.extend_from_slice(key);
    }
    let text = match call {
        VectorCall::New { elem, len } => format!(" {} {len}", String::from_utf8_lossy(type_name(*elem))),
        VectorCall::Update { op, elem, offset, data } => format!(
            " {} {} {offset} {}",
            String::from_utf8_lossy(op_name(*op)),
            String::from_utf8_lossy(type_name(*elem)),
            data.len()
        ),
        VectorCall::Get { offset, count } => format!(" {offset} {count}"),
        VectorCall::Len => String::new(),
    };
    out.extend_from_slice(text.as_bytes());
    if let Some(flags) = meta.filter(|flags| !flags.is_empty()) {
        out.push(b' ');
        out.extend_from_slice(flags);
    }
    if noreply {
        out.extend_from_slice(b" noreply");
    }
    out.extend_from_slice(b"\r\n");
    if let VectorCall::Update { data, .. } = call {
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(line: &str) -> Vec<&[u8]> {
        line.split(' ').map(str::as_bytes).collect()
    }

    #[test]
    fn lines_parse_and_bad_ones_say_why() {
        assert_eq!(parse(&tokens("vnew v f32 1024")), Ok((VectorCall::New { elem: VectorElem::F32, len: 1024 }, 0)));
        let update = VectorCall::Update { op: VectorOpCode::Max, elem: VectorElem::I64, offset: 3, data: &[] };
        assert_eq!(parse(&tokens("vupd v max i64 3 16")), Ok((update, 16)));
        assert_eq!(parse(&tokens("vget v 0 8")), Ok((VectorCall::Get { offset: 0, count: 8 }, 0)));
        assert_eq!(parse(&tokens("vlen v")), Ok((VectorCall::Len, 0)));
        assert_eq!(parse(&tokens("vnew v f16 4")), Err("vector type must be i64, u64, f64 or f32"));
        assert_eq!(parse(&tokens("vupd v mul i64 0 8")), Err("unknown vector operation"));
        assert_eq!(parse(&tokens("vget v -1 8")), Err("bad command line format"));
        assert_eq!(parse(&tokens("vnew v f32")), Err("bad command line format"));
    }
}
