//! The two RESP (redis) commands the benchmarks need, GET and SET, for both sides. RESP lives here,
//! not in tierkv-protocol, because tierkv does not serve it.

/// Appends `GET <key>` as a RESP array.
pub fn encode_get(out: &mut Vec<u8>, key: &[u8]) {
    out.extend_from_slice(b"*2\r\n$3\r\nGET\r\n");
    bulk(out, key);
}

/// Appends `SET <key> <value>` as a RESP array.
pub fn encode_set(out: &mut Vec<u8>, key: &[u8], value: &[u8]) {
    out.extend_from_slice(b"*3\r\n$3\r\nSET\r\n");
    bulk(out, key);
    bulk(out, value);
}

fn bulk(out: &mut Vec<u8>, data: &[u8]) {
    out.push(b'$');
    tierkv_protocol::write_u64(out, data.len() as u64);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// A RESP reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply<'a> {
    /// `+...`
    Simple(&'a [u8]),
    /// `-...`
    Error(&'a [u8]),
    /// `:n`
    Integer(i64),
    /// `$n` data, or `$-1` (None).
    Bulk(Option<&'a [u8]>),
}

/// What a RESP decoder made of its input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decoded<T> {
    /// A value and the bytes it took.
    Done(T, usize),
    /// More bytes are needed.
    Incomplete,
    /// Not RESP; why.
    Invalid(&'static str),
}

/// Largest bulk string accepted.
pub const MAX_BULK_BYTES: usize = 1 << 20;
/// Most arguments in a command.
pub const MAX_ARGUMENTS: usize = 8;

fn line(input: &[u8]) -> Option<(&[u8], usize)> {
    let newline = memchr_newline(input)?;
    if newline == 0 || input[newline - 1] != b'\r' {
        return None;
    }
    Some((&input[..newline - 1], newline + 1))
}

fn memchr_newline(input: &[u8]) -> Option<usize> {
    input.iter().position(|&b| b == b'\n')
}

fn number(text: &[u8]) -> Option<i64> {
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// Decodes one reply.
pub fn decode_reply(input: &[u8]) -> Decoded<Reply<'_>> {
    let Some((first, after)) = line(input) else {
        return if input.len() > 1024 { Decoded::Invalid("RESP line too long") } else { Decoded::Incomplete };
    };
    let Some((&kind, rest)) = first.split_first() else { return Decoded::Invalid("empty RESP line") };
    match kind {
        b'+' => Decoded::Done(Reply::Simple(rest), after),
        b'-' => Decoded::Done(Reply::Error(rest), after),
        b':' => match number(rest) {
            Some(n) => Decoded::Done(Reply::Integer(n), after),
            None => Decoded::Invalid("bad RESP integer"),
        },
        b'$' => match number(rest) {
            Some(-1) => Decoded::Done(Reply::Bulk(None), after),
            Some(n) if (0..=MAX_BULK_BYTES as i64).contains(&n) => {
                let end = after + n as usize;
                if input.len() < end + 2 {
                    Decoded::Incomplete
                } else if &input[end..end + 2] != b"\r\n" {
                    Decoded::Invalid("bad RESP bulk terminator")
                } else {
                    Decoded::Done(Reply::Bulk(Some(&input[after..end])), end + 2)
                }
            }
            _ => Decoded::Invalid("bad RESP bulk length"),
        },
        _ => Decoded::Invalid("unknown RESP reply"),
    }
}

/// Decodes one command (an array of bulk strings) into `args`; returns how many there are.
pub fn decode_command<'a>(input: &'a [u8], args: &mut [&'a [u8]; MAX_ARGUMENTS]) -> Decoded<usize> {
    let Some((first, mut at)) = line(input) else {
        return if input.len() > 1024 { Decoded::Invalid("RESP line too long") } else { Decoded::Incomplete };
    };
    let count = match first.split_first() {
        Some((b'*', n)) => match number(n) {
            Some(n) if (1..=MAX_ARGUMENTS as i64).contains(&n) => n as usize,
            _ => return Decoded::Invalid("bad RESP array length"),
        },
        _ => return Decoded::Invalid("RESP command is not an array"),
    };
    for arg in args.iter_mut().take(count) {
        let Some((header, after)) = line(&input[at..]) else { return Decoded::Incomplete };
        let length = match header.split_first() {
            Some((b'$', n)) => match number(n) {
                Some(n) if (0..=MAX_BULK_BYTES as i64).contains(&n) => n as usize,
                _ => return Decoded::Invalid("bad RESP bulk length"),
            },
            _ => return Decoded::Invalid("RESP argument is not a bulk string"),
        };
        let start = at + after;
        if input.len() < start + length + 2 {
            return Decoded::Incomplete;
        }
        *arg = &input[start..start + length];
        at = start + length + 2;
    }
    Decoded::Done(count, at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_and_replies_round_trip() {
        let mut out = Vec::new();
        encode_set(&mut out, b"k", b"value");
        encode_get(&mut out, b"k");
        let mut args = [&b""[..]; MAX_ARGUMENTS];
        let Decoded::Done(3, used) = decode_command(&out, &mut args) else { panic!() };
        assert_eq!(&args[..3], [&b"SET"[..], b"k", b"value"]);
        let Decoded::Done(2, rest) = decode_command(&out[used..], &mut args) else { panic!() };
        assert_eq!(used + rest, out.len());
        for end in 0..out.len() - rest {
            assert_eq!(decode_command(&out[..end], &mut args), Decoded::Incomplete);
        }
        assert_eq!(decode_reply(b"+OK\r\n"), Decoded::Done(Reply::Simple(b"OK"), 5));
        assert_eq!(decode_reply(b"$-1\r\n"), Decoded::Done(Reply::Bulk(None), 5));
        assert_eq!(decode_reply(b"$2\r\nhi\r\n"), Decoded::Done(Reply::Bulk(Some(b"hi")), 8));
        assert_eq!(decode_reply(b"$2\r\nhi"), Decoded::Incomplete);
        assert_eq!(decode_reply(b":12\r\n"), Decoded::Done(Reply::Integer(12), 5));
        assert!(matches!(decode_reply(b"?\r\n"), Decoded::Invalid(_)));
    }
}
