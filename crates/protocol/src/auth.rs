//! memcached's ASCII authentication (`-Y FILE`, memcached 1.6): until a connection has
//! authenticated, the only request taken is `set <key> <flags> <exptime> <bytes>` whose data
//! is `<user> <password>`; everything else is answered `CLIENT_ERROR unauthenticated`. Pure
//! functions over bytes; checking the credentials is the server's job.

/// Longest credentials block accepted (memcached's `MAX_AUTH_REQ_LEN`).
pub const MAX_AUTH_BYTES: usize = 16384;
/// A line this long without its newline is junk: the connection closes (memcached: 2048).
pub const MAX_AUTH_LINE_BYTES: usize = 2048;

/// What the front of an unauthenticated connection's input holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsciiAuth<'a> {
    /// More bytes are needed.
    Incomplete,
    /// No line within `MAX_AUTH_LINE_BYTES`: close the connection.
    Close,
    /// Answer `reply` (a whole line) and skip `consumed` bytes.
    Refused {
        /// What to answer.
        reply: &'static [u8],
        /// The bytes it took.
        consumed: usize,
    },
    /// Credentials to check, in `consumed` bytes.
    Credentials {
        /// The user name.
        user: &'a [u8],
        /// The password.
        password: &'a [u8],
        /// The bytes it took.
        consumed: usize,
    },
}

/// The reply to any request before authentication.
pub const UNAUTHENTICATED: &[u8] = b"CLIENT_ERROR unauthenticated\r\n";
/// The reply to credentials that do not match.
pub const FAILED: &[u8] = b"CLIENT_ERROR authentication failure\r\n";

/// Reads one authentication attempt (or refusal) from the front of `input`.
pub fn decode(input: &[u8]) -> AsciiAuth<'_> {
    let Some(newline) = memchr::memchr(b'\n', input) else {
        return if input.len() > MAX_AUTH_LINE_BYTES { AsciiAuth::Close } else { AsciiAuth::Incomplete };
    };
    let line = &input[..newline];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let refuse = |reply| AsciiAuth::Refused { reply, consumed: newline + 1 };
    let tokens: Vec<&[u8]> = line.split(|&b| b == b' ').filter(|t| !t.is_empty()).take(6).collect();
    if tokens.len() < 5 || tokens[0] != b"set" {
        return refuse(UNAUTHENTICATED);
    }
    let Some(size) = crate::strtoul32(tokens[4]).map(|size| size as usize) else {
        return refuse(UNAUTHENTICATED);
    };
    if size > MAX_AUTH_BYTES {
        return refuse(b"CLIENT_ERROR auth token too long\r\n");
    }
    let start = newline + 1;
    let end = start + size + 2;
    if input.len() < end {
        return AsciiAuth::Incomplete;
    }
    if &input[end - 2..end] != b"\r\n" {
        return AsciiAuth::Refused { reply: b"CLIENT_ERROR bad command line termination\r\n", consumed: end };
    }
    let data = &input[start..end - 2];
    match memchr::memchr(b' ', data) {
        Some(space) => AsciiAuth::Credentials { user: &data[..space], password: &data[space + 1..], consumed: end },
        None => AsciiAuth::Refused { reply: b"CLIENT_ERROR bad authentication token format\r\n", consumed: end },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_auth_set_carries_user_and_password() {
        let input = b"set anything 0 0 12\r\nalice secret\r\nget k\r\n";
        assert_eq!(decode(input), AsciiAuth::Credentials { user: b"alice", password: b"secret", consumed: 35 });
        assert_eq!(decode(&input[..30]), AsciiAuth::Incomplete);
        assert_eq!(decode(b"set a 0 0 12"), AsciiAuth::Incomplete);
        let password_with_space = decode(b"set a 0 0 9\r\nbob a b c\r\n");
        assert_eq!(password_with_space, AsciiAuth::Credentials { user: b"bob", password: b"a b c", consumed: 24 });
    }

    #[test]
    fn anything_else_is_refused_as_memcached_refuses_it() {
        let refused = |input: &[u8]| match decode(input) {
            AsciiAuth::Refused { reply, consumed } => (String::from_utf8_lossy(reply).into_owned(), consumed),
            other => panic!("{other:?}"),
        };
        assert_eq!(refused(b"get foo\r\n"), ("CLIENT_ERROR unauthenticated\r\n".into(), 9));
        assert_eq!(refused(b"x\r\n").0, "CLIENT_ERROR unauthenticated\r\n");
        assert_eq!(refused(b"set a 0 0\r\n").0, "CLIENT_ERROR unauthenticated\r\n");
        assert_eq!(refused(b"set a 0 0 x\r\n").0, "CLIENT_ERROR unauthenticated\r\n");
        assert_eq!(refused(b"set a 0 0 20000\r\n"), ("CLIENT_ERROR auth token too long\r\n".into(), 17));
        assert_eq!(
            refused(b"set a 0 0 5\r\nalice\r\n"),
            ("CLIENT_ERROR bad authentication token format\r\n".into(), 20)
        );
        assert_eq!(refused(b"set a 0 0 3\r\nabcde\r\n"), ("CLIENT_ERROR bad command line termination\r\n".into(), 18));
        assert_eq!(decode(&[b'x'; 3000]), AsciiAuth::Close);
        assert_eq!(decode(&[0x80; 24]), AsciiAuth::Incomplete, "binary bytes wait for a line, as in memcached");
    }
}
