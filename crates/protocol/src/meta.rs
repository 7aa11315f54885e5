//! Meta command flags (`mg`, `ms`, `md`, `ma`): parsed values for the server, plus the tokens as
//! sent so replies can return flags in request order.

use crate::number::{strtol32, strtoul32, strtoull};

/// Longest opaque token memcached returns (including the `O`).
pub const MAX_OPAQUE_BYTES: usize = 32;

/// The flags of one meta request, kept small because every decoded request carries them (a
/// batch copies requests): the tokens as sent, one bit per letter present, and the three TTLs
/// the server reads. Every other value is taken from the tokens again when asked for (they
/// were checked when the flags were parsed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetaFlags<'a> {
    /// The flag tokens as sent (space separated), for replies.
    pub tokens: &'a [u8],
    /// One bit per flag letter present (bit = letter - b'A').
    present: u64,
    /// `T`, `N` and `R` (memcached parses them as 32-bit numbers).
    ttl: i32,
    vivify_ttl: i32,
    recache_ttl: i32,
}

impl<'a> MetaFlags<'a> {
    /// Whether flag `letter` was sent.
    pub fn has(&self, letter: u8) -> bool {
        letter_bit(letter).is_some_and(|bit| self.present & bit != 0)
    }

    /// `q`: suppress the nominal reply.
    pub fn quiet(&self) -> bool {
        self.has(b'q')
    }

    /// `b`: the key is base64.
    pub fn base64(&self) -> bool {
        self.has(b'b')
    }

    /// `v`: return the value.
    pub fn return_value(&self) -> bool {
        self.has(b'v')
    }

    /// `t`: return the TTL left.
    pub fn return_ttl(&self) -> bool {
        self.has(b't')
    }

    /// `l`: return the seconds since the last access.
    pub fn return_last_access(&self) -> bool {
        self.has(b'l')
    }

    /// `I`: invalidate (md: mark stale instead of deleting; ms: a late writer's value is kept
    /// stale).
    pub fn invalidate(&self) -> bool {
        self.has(b'I')
    }

    /// memcached applies mg's flags in order: a `t` sent before `T` returns the TTL the item
    /// had before the touch.
    pub fn ttl_before_touch(&self) -> bool {
        if !(self.has(b't') && self.has(b'T')) {
            return false;
        }
        let position = |letter: u8| self.iter().position(|token| token[0] == letter);
        position(b't') < position(b'T')
    }

    /// The flag tokens in request order.
    pub fn iter(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.tokens.split(|&b| b == b' ').filter(|token| !token.is_empty())
    }

    /// What follows `letter` in its token, if the flag was sent.
    fn value_of(&self, letter: u8) -> Option<&'a [u8]> {
        if !self.has(letter) {
            return None;
        }
        self.iter().find(|token| token[0] == letter).map(|token| &token[1..])
    }

    fn ttl_if(&self, letter: u8, value: i32) -> Option<i64> {
        self.has(letter).then_some(i64::from(value))
    }

    /// `T`: new TTL.
    pub fn ttl(&self) -> Option<i64> {
        self.ttl_if(b'T', self.ttl)
    }

    /// `N`: vivify on miss with this TTL.
    pub fn vivify_ttl(&self) -> Option<i64> {
        self.ttl_if(b'N', self.vivify_ttl)
    }

    /// `R`: recache when the TTL left is below this.
    pub fn recache_ttl(&self) -> Option<i64> {
        self.ttl_if(b'R', self.recache_ttl)
    }

    /// `O`: opaque token (without the letter).
    pub fn opaque(&self) -> Option<&'a [u8]> {
        self.value_of(b'O')
    }

    /// `F`: client flags (ms).
    pub fn client_flags(&self) -> Option<u32> {
        self.value_of(b'F').and_then(strtoul32)
    }

    /// `C`: compare CAS.
    pub fn cas(&self) -> Option<u64> {
        self.value_of(b'C').and_then(strtoull)
    }

    /// `M`: mode letter (ms, ma).
    pub fn mode(&self) -> Option<u8> {
        self.value_of(b'M').and_then(|value| value.first().copied())
    }

    /// `J`: initial value (ma).
    pub fn initial(&self) -> Option<u64> {
        self.value_of(b'J').and_then(strtoull)
    }

    /// `D`: delta (ma).
    pub fn delta(&self) -> Option<u64> {
        self.value_of(b'D').and_then(strtoull)
    }
}

fn letter_bit(letter: u8) -> Option<u64> {
    letter.is_ascii_alphabetic().then(|| 1u64 << (letter - b'A'))
}

/// Parses the flag tokens of a meta command the way memcached 1.6's `_meta_flag_preparse` does.
/// Errors carry memcached's reply text (after `CLIENT_ERROR `).
pub fn parse_flags(tokens: &[u8]) -> Result<MetaFlags<'_>, &'static str> {
    parse_flags_allowing(tokens, b"")
}

/// `parse_flags` for tierkv's own meta commands, which also take the letters in `extra` (each
/// without a value, like `v`).
pub fn parse_flags_allowing<'a>(tokens: &'a [u8], extra: &[u8]) -> Result<MetaFlags<'a>, &'static str> {
    let mut flags = MetaFlags { tokens, ..MetaFlags::default() };
    let mut seen = [false; 128];
    let mut error = None;
    for token in tokens.split(|&b| b == b' ').filter(|t| !t.is_empty()) {
        let letter = token[0];
        if letter >= 127 || seen[letter as usize] {
            return Err("duplicate flag");
        }
        seen[letter as usize] = true;
        let value = &token[1..];
        let bad_token = "bad token in command line format";
        let mut ttl = |slot: &mut i32| {
            *slot = parse_or(strtol32(value), &mut error, bad_token).unwrap_or(0);
        };
        match letter {
            b'N' => ttl(&mut flags.vivify_ttl),
            b'T' => ttl(&mut flags.ttl),
            b'R' => ttl(&mut flags.recache_ttl),
            b'F' => _ = parse_or(strtoul32(value), &mut error, bad_token),
            b'C' => _ = parse_or(strtoull(value), &mut error, bad_token),
            b'J' => _ = parse_or(strtoull(value), &mut error, "invalid numeric initial value"),
            b'D' => _ = parse_or(strtoull(value), &mut error, "invalid numeric delta value"),
            b'M' if token.len() != 2 => error = error.or(Some("incorrect length for M token")),
            b'M' | b'O' => {}
            b'b' | b'l' | b'P' | b'L' | b'k' | b's' | b't' | b'c' | b'f' | b'v' | b'h' | b'u' | b'q' | b'I' => {}
            _ if extra.contains(&letter) => {}
            _ => return Err("invalid flag"),
        }
        flags.present |= letter_bit(letter).unwrap_or(0);
    }
    match error {
        Some(message) => Err(message),
        None => Ok(flags),
    }
}

fn parse_or<T>(value: Option<T>, error: &mut Option<&'static str>, message: &'static str) -> Option<T> {
    if value.is_none() && error.is_none() {
        *error = Some(message);
    }
    value
}

#[cfg(test)]
mod tests {

    #[test]
    fn ttl_before_touch_follows_the_order_sent() {
        let before = |tokens: &'static str| parse_flags(tokens.as_bytes()).unwrap().ttl_before_touch();
        assert!(before("t T30") && before("v t s T30"));
        assert!(!before("T30 t") && !before("t") && !before("T30") && !before(""));
        let flags = parse_flags(b"v t l I").unwrap();
        assert!(flags.return_value() && flags.return_ttl() && flags.return_last_access() && flags.invalidate());
        assert!(!parse_flags(b"k").unwrap().return_value());
    }

    use super::*;

    #[test]
    fn parses_values_and_keeps_order() {
        let flags = parse_flags(b"v T30 F7 C99 O123 k q MS N5 R1 J4 D2 b").unwrap();
        assert_eq!(flags.ttl(), Some(30));
        assert_eq!(flags.client_flags(), Some(7));
        assert_eq!(flags.cas(), Some(99));
        assert_eq!(flags.opaque(), Some(&b"123"[..]));
        assert_eq!((flags.mode(), flags.vivify_ttl(), flags.recache_ttl()), (Some(b'S'), Some(5), Some(1)));
        assert_eq!((flags.initial(), flags.delta()), (Some(4), Some(2)));
        let none = parse_flags(b"v k").unwrap();
        assert_eq!(
            (none.ttl(), none.vivify_ttl(), none.cas(), none.opaque(), none.mode()),
            (None, None, None, None, None)
        );
        assert_eq!(parse_flags(b"T-1 N0").unwrap().ttl(), Some(-1));
        assert_eq!(parse_flags(b"T-1 N0").unwrap().vivify_ttl(), Some(0));
        assert!(flags.has(b'v') && flags.quiet() && flags.base64() && flags.has(b'k') && !flags.has(b'c'));
        let order: Vec<&[u8]> = flags.iter().collect();
        assert_eq!(order[0], b"v");
        assert_eq!(order[5], b"k");
    }

    #[test]
    fn errors_use_memcached_messages() {
        assert_eq!(parse_flags(b"v v"), Err("duplicate flag"));
        assert_eq!(parse_flags(b"Tx"), Err("bad token in command line format"));
        assert_eq!(parse_flags(b"MSS"), Err("incorrect length for M token"));
        assert_eq!(parse_flags(b"Jx"), Err("invalid numeric initial value"));
        assert_eq!(parse_flags(b"D-1"), Err("invalid numeric delta value"));
        assert_eq!(parse_flags(b"z"), Err("invalid flag"));
        assert_eq!(parse_flags(b"\xff"), Err("duplicate flag"), "memcached's reply for bytes >= 127");
        assert_eq!(parse_flags(b""), Ok(MetaFlags::default()));
    }
}
