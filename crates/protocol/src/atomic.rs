//! tierkv's atomics on the wire (docs/protocol-extensions.md): the text `atomic` line, the
//! binary ATOMIC opcodes' extras, and the replies. Pure functions over bytes.
//!
//! ```text
//! atomic <key> <op> <type> <operand> [<operand2>] [noreply]\r\n
//!   op:   add | cas | min | max | and | or | xor     (cas takes <expected> <new>)
//!   type: u64 | i64
//! OK <old> <new>\r\n | EXISTS <current>\r\n | NOT_FOUND\r\n | CLIENT_ERROR <why>\r\n
//!
//! binary ATOMIC (0x60) / ATOMICQ (0x61): extras 18 bytes, big-endian
//!   0 op u8 (0 add, 1 cas, 2 min, 3 max, 4 and, 5 or, 6 xor) | 1 type u8 (0 u64, 1 i64)
//!   2 operand u64 | 10 operand2 u64;  key required, no value
//! reply value: old u64 | new u64 (SUCCESS), current u64 (KEY_EEXISTS)
//! ```

use crate::number::write_u64;
use crate::request::AtomicCode;

/// The op names of the text grammar, in `AtomicCode` order (and the binary op byte).
const OPS: [(&[u8], AtomicCode); 7] = [
    (b"add", AtomicCode::Add),
    (b"cas", AtomicCode::Cas),
    (b"min", AtomicCode::Min),
    (b"max", AtomicCode::Max),
    (b"and", AtomicCode::And),
    (b"or", AtomicCode::Or),
    (b"xor", AtomicCode::Xor),
];

/// A parsed `atomic` line, before it becomes a command.
#[derive(Debug, PartialEq, Eq)]
pub struct AtomicLine<'a> {
    /// The counter's key.
    pub key: &'a [u8],
    /// The operation.
    pub code: AtomicCode,
    /// The counter is signed.
    pub signed: bool,
    /// The operand (for compare-and-swap, the expected value).
    pub operand: u64,
    /// For compare-and-swap, the new value.
    pub operand2: u64,
    /// No reply is wanted.
    pub noreply: bool,
}

/// Reads a decimal operand: digits for u64, an optional '-' for i64. `add` also takes a
/// negative operand for u64 (subtraction, wrapping like the sum).
fn operand(token: &[u8], signed: bool, negative_ok: bool) -> Option<u64> {
    let text = std::str::from_utf8(token).ok()?;
    if signed {
        return text.parse::<i64>().ok().map(|v| v as u64);
    }
    match text.strip_prefix('-') {
        Some(digits) if negative_ok && digits.bytes().all(|b| b.is_ascii_digit()) => {
            digits.parse::<u64>().ok().map(u64::wrapping_neg)
        }
        _ if text.bytes().all(|b| b.is_ascii_digit()) => text.parse::<u64>().ok(),
        _ => None,
    }
}

/// Parses the tokens of an `atomic` line (the verb first). Errors are CLIENT_ERROR messages.
pub fn parse_text<'a>(tokens: &[&'a [u8]], max_key_bytes: usize) -> Result<AtomicLine<'a>, (&'static str, bool)> {
    let noreply = tokens.last() == Some(&&b"noreply"[..]);
    let args = &tokens[1..tokens.len() - usize::from(noreply)];
    if args.len() < 4 {
        return Err(("bad command line format", noreply));
    }
    match parse_args(args, max_key_bytes) {
        Ok((line, used)) if used == args.len() => Ok(AtomicLine { noreply, ..line }),
        Ok(_) => Err(("bad command line format", noreply)),
        Err(message) => Err((message, noreply)),
    }
}

/// How many tokens (key included) an atomic's arguments take, judged by its op token: five
/// for `cas`, four for the others. `mx` reads its flags after them.
pub fn argument_count(op: &[u8]) -> usize {
    if op == b"cas" {
        5
    } else {
        4
    }
}

/// Reads `<key> <op> <type> <operand> [<operand2>]` from the front of `args` (at least four
/// tokens); returns the line (noreply false) and how many tokens it used.
pub fn parse_args<'a>(args: &[&'a [u8]], max_key_bytes: usize) -> Result<(AtomicLine<'a>, usize), &'static str> {
    let (key, op, kind) = (args[0], args[1], args[2]);
    if key.len() > max_key_bytes {
        return Err("bad command line format");
    }
    let Some(&(_, code)) = OPS.iter().find(|(name, _)| *name == op) else {
        return Err("unknown atomic operation");
    };
    let signed = match kind {
        b"u64" => false,
        b"i64" => true,
        _ => return Err("atomic type must be u64 or i64"),
    };
    let wanted = argument_count(op);
    if args.len() < wanted {
        return Err("bad command line format");
    }
    let a = operand(args[3], signed, code == AtomicCode::Add).ok_or("invalid numeric operand")?;
    let b = if wanted == 5 { operand(args[4], signed, false).ok_or("invalid numeric operand")? } else { 0 };
    Ok((AtomicLine { key, code, signed, operand: a, operand2: b, noreply: false }, wanted))
}

/// The binary extras' op and type bytes, if valid.
pub fn from_binary(op: u8, kind: u8) -> Option<(AtomicCode, bool)> {
    let code = OPS.get(usize::from(op))?.1;
    match kind {
        0 => Some((code, false)),
        1 => Some((code, true)),
        _ => None,
    }
}

/// The binary op byte of `code`.
pub fn binary_op(code: AtomicCode) -> u8 {
    OPS.iter().position(|(_, c)| *c == code).expect("every code has a name") as u8
}

/// The text name of `code`.
pub fn name(code: AtomicCode) -> &'static [u8] {
    OPS[usize::from(binary_op(code))].0
}

/// `value` in decimal, with a leading '-' when `signed` and negative.
pub fn write_number(out: &mut Vec<u8>, value: u64, signed: bool) {
    if signed && (value as i64) < 0 {
        out.push(b'-');
        write_u64(out, (value as i64).unsigned_abs());
    } else {
        write_u64(out, value);
    }
}

/// The request line `atomic <key> <op> <type> <operand> [<operand2>]` (no noreply, no CRLF).
pub fn write_text_request(out: &mut Vec<u8>, key: &[u8], code: AtomicCode, signed: bool, operand: u64, operand2: u64) {
    write_request(out, b"atomic ", key, code, signed, operand, operand2);
}

/// The line `mx <key> <op> <type> <operand> [<operand2>]`, then ` <flags>` if any (no CRLF).
pub fn write_meta_request(out: &mut Vec<u8>, key: &[u8], atomic: (AtomicCode, bool, u64, u64), flags: &[u8]) {
    let (code, signed, operand, operand2) = atomic;
    write_request(out, b"mx ", key, code, signed, operand, operand2);
    if !flags.is_empty() {
        out.push(b' ');
        out.extend_from_slice(flags);
    }
}

fn write_request(out: &mut Vec<u8>, verb: &[u8], key: &[u8], code: AtomicCode, signed: bool, a: u64, b: u64) {
    let (operand, operand2) = (a, b);
    out.extend_from_slice(verb);
    out.extend_from_slice(key);
    out.push(b' ');
    out.extend_from_slice(name(code));
    out.extend_from_slice(if signed { b" i64 " } else { b" u64 " });
    write_number(out, operand, signed);
    if code == AtomicCode::Cas {
        out.push(b' ');
        write_number(out, operand2, signed);
    }
}

/// `OK <old> <new>\r\n`.
pub fn write_done(out: &mut Vec<u8>, old: u64, new: u64, signed: bool) {
    out.extend_from_slice(b"OK ");
    write_number(out, old, signed);
    out.push(b' ');
    write_number(out, new, signed);
    out.extend_from_slice(b"\r\n");
}

/// `EXISTS <current>\r\n` (a `cas` that found another value).
pub fn write_mismatch(out: &mut Vec<u8>, current: u64, signed: bool) {
    out.extend_from_slice(b"EXISTS ");
    write_number(out, current, signed);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<AtomicLine<'_>, (&'static str, bool)> {
        let tokens: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        parse_text(&tokens, 250)
    }

    #[test]
    fn the_grammar_round_trips_through_the_reply_writers() {
        let l = parse("atomic k add i64 -5").unwrap();
        assert_eq!(
            (l.key, l.code, l.signed, l.operand as i64, l.noreply),
            (&b"k"[..], AtomicCode::Add, true, -5, false)
        );
        let l = parse("atomic k cas u64 7 9 noreply").unwrap();
        assert_eq!((l.code, l.operand, l.operand2, l.noreply), (AtomicCode::Cas, 7, 9, true));
        assert_eq!(parse("atomic k add u64 -1").unwrap().operand, u64::MAX, "a u64 add may subtract");
        assert_eq!(parse("atomic k xor u64 18446744073709551615").unwrap().operand, u64::MAX);
        for (code, op) in OPS.iter().map(|(n, c)| (*c, *n)) {
            assert_eq!(name(code), op);
            assert_eq!(from_binary(binary_op(code), 1), Some((code, true)));
        }
        let mut out = Vec::new();
        write_done(&mut out, (-3i64) as u64, 4, true);
        write_mismatch(&mut out, u64::MAX, false);
        assert_eq!(out, b"OK -3 4\r\nEXISTS 18446744073709551615\r\n");
    }

    #[test]
    fn bad_lines_say_what_is_wrong() {
        assert_eq!(parse("atomic k").unwrap_err().0, "bad command line format");
        assert_eq!(parse("atomic k mul u64 3").unwrap_err().0, "unknown atomic operation");
        assert_eq!(parse("atomic k add f64 3").unwrap_err().0, "atomic type must be u64 or i64");
        assert_eq!(parse("atomic k add u64 3 4").unwrap_err().0, "bad command line format");
        assert_eq!(parse("atomic k cas u64 3").unwrap_err().0, "bad command line format");
        assert_eq!(parse("atomic k min u64 -3").unwrap_err().0, "invalid numeric operand");
        assert_eq!(parse("atomic k min i64 9223372036854775808").unwrap_err().0, "invalid numeric operand");
        assert_eq!(parse("atomic k max u64 x noreply").unwrap_err(), ("invalid numeric operand", true));
        assert_eq!(from_binary(7, 0), None);
        assert_eq!(from_binary(0, 2), None);
    }
}
