//! The text protocol (classic commands and meta commands) on the server side: one request line,
//! then for storage commands a data block, decoded into `Request`.

// The helpers return a finished `Decoded` as their error so callers can pass it straight on;
// it is large, but boxing it would allocate on the error path for no gain.
#![allow(clippy::result_large_err)]

mod extensions;

use crate::meta::{parse_flags, MetaFlags, MAX_OPAQUE_BYTES};
use crate::number::{strtol32, strtoul32, strtoull};
use crate::{
    ArithInitial, Command, Decoded, ErrorReply, Key, KeySpan, Keys, Limits, ProtocolError, ReplyStyle, Request,
    StoreMode, VectorCall,
};

const BAD_FORMAT: &str = "bad command line format";
/// memcached's one answer to any flag error of md and ma.
const MD_MA_FLAG_ERROR: &str = "invalid or duplicate flag";
/// Most leading spaces memcached tolerates before a long retrieval line.
const MAX_LEADING_SPACES: usize = 100;

/// Decodes the text or meta request at the front of `input`.
pub fn decode_request<'a>(input: &'a [u8], limits: &Limits) -> Decoded<'a> {
    let Some(newline) = memchr::memchr(b'\n', input) else {
        return incomplete_line(input, limits);
    };
    let line_end = if newline > 0 && input[newline - 1] == b'\r' { newline - 1 } else { newline };
    let line = Line { bytes: &input[..line_end], consumed: newline + 1 };
    let mut tokens = split(line.bytes);
    let Some(command) = tokens.next() else {
        return line.error(ErrorReply::Error);
    };
    match command {
        b"get" => line.retrieval(false, false, limits),
        b"gets" => line.retrieval(true, false, limits),
        b"gat" => line.retrieval(false, true, limits),
        b"gats" => line.retrieval(true, true, limits),
        b"set" => line.storage(input, StoreMode::Set, limits),
        b"add" => line.storage(input, StoreMode::Add, limits),
        b"replace" => line.storage(input, StoreMode::Replace, limits),
        b"append" => line.storage(input, StoreMode::Append, limits),
        b"prepend" => line.storage(input, StoreMode::Prepend, limits),
        b"cas" => line.storage(input, StoreMode::Cas, limits),
        b"delete" => line.delete(limits),
        b"incr" => line.arith(false, limits),
        b"decr" => line.arith(true, limits),
        b"touch" => line.touch(limits),
        b"atomic" => line.atomic(limits),
        b"vnew" | b"vupd" | b"vget" | b"vlen" => line.vector(input, limits),
        b"flush_all" => line.flush_all(),
        b"stats" => line.ok(Command::Stats { args: rest_after(line.bytes, 1) }, false),
        b"version" => line.ok(Command::Version, false),
        b"quit" => line.ok(Command::Quit, false),
        b"verbosity" => line.verbosity(),
        b"mn" => line.meta_ok(Command::Noop, b""),
        b"mg" => line.meta_get(limits),
        b"ms" => line.meta_set(input, limits),
        b"md" => line.meta_delete(limits),
        b"ma" => line.meta_arith(limits),
        b"me" => line.meta_debug(limits),
        b"mx" => line.meta_atomic(limits),
        b"mv" => line.meta_vector(input, limits),
        b"shutdown" | b"slabs" | b"cache_memlimit" | b"lru_crawler" | b"lru" | b"watch" | b"refresh_certs" => {
            line.ok(Command::Admin { line: line.bytes }, false)
        }
        _ if is_cross_protocol(command, line.bytes) => {
            Decoded::Error(ProtocolError::closing(ErrorReply::Nothing, line.consumed))
        }
        _ => line.error(ErrorReply::Error),
    }
}

/// memcached's defence against requests a browser sends to its port (`GET / HTTP/1.1`): an
/// unknown command whose last token starts with `HTTP/` closes the connection without a reply.
/// memcached answers `ERROR` before it looks, for lines that start with a letter of its own
/// commands' first letters, for two-letter meta-like commands and for one-letter commands.
fn is_cross_protocol(command: &[u8], line: &[u8]) -> bool {
    let own_letter = matches!(command.first(), Some(b'g' | b's' | b'a' | b'c' | b'i' | b'd' | b't'));
    let meta_like = command.first() == Some(&b'm') && command.len() == 2;
    if command.len() < 2 || own_letter || meta_like {
        return false;
    }
    split(line).last().is_some_and(|token| token.starts_with(b"HTTP/"))
}

/// The first part of a `get`/`gets` line too long to take whole (memcached serves lines of any
/// length): the server answers these keys, then decodes the rest of the line with `verb` put
/// in front of it, so a line of any length costs a bounded buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
// Returned by value once per piece of a long line, never stored: its size costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum LongGet<'a> {
    /// Not a long get line: decode as usual (or wait for more input).
    No,
    /// A get of the line's leading keys; `consumed` bytes end where the next key starts.
    Keys {
        /// The first keys' get.
        request: Request<'a>,
        /// The bytes they took.
        consumed: usize,
        /// The verb to put before the rest.
        verb: &'static [u8],
    },
    /// A key is longer than the limit: answer `CLIENT_ERROR bad command line format` and skip
    /// the rest of the line.
    BadKey,
    /// A long get line from which no key can be taken yet (its first key is not followed by
    /// another within the window).
    Wait,
}

/// Whether `input` starts with a `get`/`gets` line longer than `chunk_bytes` (its newline, if
/// any, lies beyond them): such a line is taken in pieces (`long_get`) instead of decoded whole.
pub fn is_long_get(input: &[u8], chunk_bytes: usize) -> bool {
    if input.len() <= chunk_bytes {
        return false;
    }
    let spaces = input.iter().take(MAX_LEADING_SPACES + 1).take_while(|&&b| b == b' ').count();
    let rest = &input[spaces..];
    (rest.starts_with(b"get ") || rest.starts_with(b"gets ")) && memchr::memchr(b'\n', &input[..=chunk_bytes]).is_none()
}

/// Takes the keys of a `get`/`gets` line that lie in its first `chunk_bytes`, when the line
/// (complete or not) is longer than that. The last key of a complete line is never taken, so
/// the rest of the line always holds a key.
pub fn long_get<'a>(input: &'a [u8], limits: &Limits, chunk_bytes: usize) -> LongGet<'a> {
    let spaces = input.iter().take(MAX_LEADING_SPACES + 1).take_while(|&&b| b == b' ').count();
    let rest = &input[spaces..];
    let (verb, return_cas): (&'static [u8], bool) = if rest.starts_with(b"get ") {
        (b"get ", false)
    } else if rest.starts_with(b"gets ") {
        (b"gets ", true)
    } else {
        return LongGet::No;
    };
    let line_end = memchr::memchr(b'\n', input).unwrap_or(input.len());
    if spaces > MAX_LEADING_SPACES || line_end <= chunk_bytes {
        return LongGet::No;
    }
    let keys_start = spaces + verb.len();
    let window = &input[..chunk_bytes];
    let mut at = keys_start;
    let mut taken = 0;
    let mut consumed = keys_start;
    loop {
        at += input[at..line_end].iter().take_while(|&&b| b == b' ').count();
        if taken == 0 {
            // Leading spaces are consumed even when no key follows within the window.
            consumed = at.min(chunk_bytes);
        }
        if at >= window.len() {
            break;
        }
        let token_len = window[at..].iter().take_while(|&&b| b != b' ').count();
        if token_len > limits.max_key_bytes {
            return LongGet::BadKey;
        }
        let end = at + token_len;
        if end == window.len() {
            break;
        }
        let next = end + input[end..line_end].iter().take_while(|&&b| b == b' ').count();
        // Only a key followed by another is taken (the last key stays for the rest).
        let followed = next < line_end && !(input[next] == b'\r' && next + 1 == line_end);
        if !followed {
            break;
        }
        taken += 1;
        consumed = next;
        at = next;
    }
    if consumed < verb.len() + spaces + 1 {
        return LongGet::Wait;
    }
    let keys = Keys::from_line(&input[keys_start..consumed]);
    debug_assert_eq!(keys.len(), taken);
    let command = Command::Get { keys, return_cas, touch: None, base64: false };
    LongGet::Keys { request: Request { command, style: ReplyStyle::Text { noreply: false } }, consumed, verb }
}

/// No newline yet: wait, unless the line is already too long (memcached closes the connection
/// then, except for `get`/`gets` lines, which may be of any length: see `long_get`).
fn incomplete_line<'a>(input: &[u8], limits: &Limits) -> Decoded<'a> {
    if input.len() <= limits.max_line_bytes {
        return Decoded::Incomplete { needed: 0 };
    }
    let spaces = input.iter().take(MAX_LEADING_SPACES + 1).take_while(|&&b| b == b' ').count();
    let rest = &input[spaces..];
    let retrieval = spaces <= MAX_LEADING_SPACES && (rest.starts_with(b"get ") || rest.starts_with(b"gets "));
    if retrieval {
        return Decoded::Incomplete { needed: 0 };
    }
    Decoded::Error(ProtocolError::closing(ErrorReply::Nothing, input.len()))
}

/// Space-separated tokens (memcached splits on spaces only).
fn split(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    line.split(|&b| b == b' ').filter(|token| !token.is_empty())
}

/// The bytes after the first `skip` tokens (and the spaces after them).
fn rest_after(line: &[u8], skip: usize) -> &[u8] {
    let mut at = 0;
    for _ in 0..skip {
        at += line[at..].iter().take_while(|&&b| b == b' ').count();
        at += line[at..].iter().take_while(|&&b| b != b' ').count();
    }
    at += line[at..].iter().take_while(|&&b| b == b' ').count();
    &line[at..]
}

/// memcached's `set_noreply_maybe`: the last token is exactly "noreply".
fn noreply(tokens: &[&[u8]]) -> bool {
    tokens.last() == Some(&&b"noreply"[..])
}

/// Most tokens a non-retrieval line may have before it is plainly malformed (memcached's
/// tokenizer stops at 24).
const MAX_TOKENS: usize = 24;

struct Line<'a> {
    bytes: &'a [u8],
    consumed: usize,
}

impl<'a> Line<'a> {
    fn tokens(&self) -> ([&'a [u8]; MAX_TOKENS], usize) {
        let mut tokens: [&[u8]; MAX_TOKENS] = [&[]; MAX_TOKENS];
        let mut count = 0;
        for token in split(self.bytes) {
            if count == MAX_TOKENS {
                return (tokens, MAX_TOKENS + 1);
            }
            tokens[count] = token;
            count += 1;
        }
        (tokens, count)
    }

    fn error(&self, reply: ErrorReply) -> Decoded<'a> {
        Decoded::Error(ProtocolError::new(reply, self.consumed))
    }

    fn client_error(&self, message: &'static str, noreply: bool) -> Decoded<'a> {
        Decoded::Error(ProtocolError { noreply, ..ProtocolError::new(ErrorReply::Client(message), self.consumed) })
    }

    fn ok(&self, command: Command<'a>, noreply: bool) -> Decoded<'a> {
        let request = Request { command, style: ReplyStyle::Text { noreply } };
        Decoded::Request { request, consumed: self.consumed }
    }

    fn retrieval(&self, return_cas: bool, touch: bool, limits: &Limits) -> Decoded<'a> {
        let mut tokens = split(self.bytes).skip(1);
        let exptime = if touch {
            let Some(token) = tokens.next() else { return self.error(ErrorReply::Error) };
            match strtol32(token) {
                Some(exptime) => Some(i64::from(exptime)),
                None => return self.client_error("invalid exptime argument", false),
            }
        } else {
            None
        };
        let keys_raw = rest_after(self.bytes, if touch { 2 } else { 1 });
        let mut count = 0;
        for key in split(keys_raw) {
            count += 1;
            if key.len() > limits.max_key_bytes {
                return self.client_error(BAD_FORMAT, false);
            }
        }
        // memcached answers a gat with an exptime and no keys with a bare END.
        if count == 0 && !touch {
            return self.error(ErrorReply::Error);
        }
        self.ok(Command::Get { keys: Keys::new(keys_raw, count), return_cas, touch: exptime, base64: false }, false)
    }

    fn storage(&self, input: &'a [u8], mode: StoreMode, limits: &Limits) -> Decoded<'a> {
        let (tokens, count) = self.tokens();
        let fields = if mode == StoreMode::Cas { 6 } else { 5 };
        if count != fields && count != fields + 1 {
            return self.error(ErrorReply::Error);
        }
        let noreply = noreply(&tokens[..count]);
        let key = tokens[1];
        if key.len() > limits.max_key_bytes {
            return self.client_error(BAD_FORMAT, noreply);
        }
        let parsed = (strtoul32(tokens[2]), strtol32(tokens[3]), strtol32(tokens[4]));
        let (Some(flags), Some(exptime), Some(length)) = parsed else {
            return self.client_error(BAD_FORMAT, noreply);
        };
        let cas = if mode == StoreMode::Cas {
            match strtoull(tokens[5]) {
                Some(cas) => cas,
                None => return self.client_error(BAD_FORMAT, noreply),
            }
        } else {
            0
        };
        if !(0..=i32::MAX - 2).contains(&length) {
            return self.client_error(BAD_FORMAT, noreply);
        }
        // memcached unlinks the old item when a plain set is refused as too large.
        let unlink = (mode == StoreMode::Set).then(|| KeySpan::of(input, key, false));
        let fits = limits.item_fits(key.len(), flags, length as usize);
        let value = match self.data_block(input, length as usize, fits, unlink, noreply) {
            Ok(value) => value,
            Err(decoded) => return decoded,
        };
        let command = Command::Store { mode, key: Key::plain(key), flags, exptime: i64::from(exptime), value, cas };
        let request = Request { command, style: ReplyStyle::Text { noreply } };
        Decoded::Request { request, consumed: self.consumed + length as usize + 2 }
    }

    /// The `length`-byte data block after the line, with its "\r\n". An item that does not
    /// `fit` is refused (its old item unlinked where `unlink` says).
    fn data_block(
        &self,
        input: &'a [u8],
        length: usize,
        fits: bool,
        unlink: Option<KeySpan>,
        noreply: bool,
    ) -> Result<&'a [u8], Decoded<'a>> {
        let total = self.consumed + length + 2;
        if !fits {
            let error = ProtocolError::new(ErrorReply::Server("object too large for cache"), total);
            return Err(Decoded::Error(ProtocolError { noreply, unlink, ..error }));
        }
        if input.len() < total {
            return Err(Decoded::Incomplete { needed: total });
        }
        if &input[total - 2..total] != b"\r\n" {
            let error = ProtocolError::new(ErrorReply::Client("bad data chunk"), total);
            return Err(Decoded::Error(ProtocolError { noreply, ..error }));
        }
        Ok(&input[self.consumed..self.consumed + length])
    }

    fn delete(&self, limits: &Limits) -> Decoded<'a> {
        let (tokens, count) = self.tokens();
        if !(2..=4).contains(&count) {
            return self.error(ErrorReply::Error);
        }
        // memcached looks for "noreply" only after the key ("delete noreply" deletes that key).
        let noreply = count > 2 && noreply(&tokens[..count]);
        if tokens[1].len() > limits.max_key_bytes {
            return self.client_error(BAD_FORMAT, noreply);
        }
        if count > 2 {
            let hold_is_zero = tokens[2] == b"0";
            let valid = (count == 3 && (hold_is_zero || noreply)) || (count == 4 && hold_is_zero && noreply);
            if !valid {
                return self.client_error("bad command line format.  Usage: delete <key> [noreply]", noreply);
            }
        }
        self.ok(Command::Delete { key: Key::plain(tokens[1]), cas: 0 }, noreply)
    }

    /// `<command> <key> <argument> [noreply]`, with memcached's checks on the key.
    fn key_and_argument(&self, limits: &Limits) -> Result<(&'a [u8], &'a [u8], bool), Decoded<'a>> {
        let (tokens, count) = self.tokens();
        if count != 3 && count != 4 {
            return Err(self.error(ErrorReply::Error));
        }
        let noreply = noreply(&tokens[..count]);
        if tokens[1].len() > limits.max_key_bytes {
            return Err(self.client_error(BAD_FORMAT, noreply));
        }
        Ok((tokens[1], tokens[2], noreply))
    }

    fn arith(&self, decrement: bool, limits: &Limits) -> Decoded<'a> {
        let (key, argument, noreply) = match self.key_and_argument(limits) {
            Ok(parts) => parts,
            Err(decoded) => return decoded,
        };
        let Some(delta) = strtoull(argument) else {
            return self.client_error("invalid numeric delta argument", noreply);
        };
        self.ok(Command::Arith { key: Key::plain(key), delta, decrement, initial: None, cas: 0 }, noreply)
    }

    /// tierkv's `atomic` line (see `crate::atomic`).
    fn atomic(&self, limits: &Limits) -> Decoded<'a> {
        let (tokens, count) = self.tokens();
        if count > MAX_TOKENS {
            return self.error(ErrorReply::Error);
        }
        match crate::atomic::parse_text(&tokens[..count], limits.max_key_bytes) {
            Ok(l) => {
                let command = Command::Atomic {
                    key: Key::plain(l.key),
                    code: l.code,
                    signed: l.signed,
                    operand: l.operand,
                    operand2: l.operand2,
                };
                self.ok(command, l.noreply)
            }
            Err((message, noreply)) => self.client_error(message, noreply),
        }
    }

    /// tierkv's vector lines (see `crate::vector`).
    fn vector(&self, input: &'a [u8], limits: &Limits) -> Decoded<'a> {
        let (tokens, count) = self.tokens();
        if !(2..=MAX_TOKENS).contains(&count) {
            return self.error(ErrorReply::Error);
        }
        let noreply = noreply(&tokens[..count]);
        let tokens = &tokens[..count - usize::from(noreply)];
        // "vlen noreply" has no key once its noreply is taken.
        if tokens.len() < 2 || tokens[1].len() > limits.max_key_bytes {
            return self.client_error(BAD_FORMAT, noreply);
        }
        let (call, length) = match crate::vector::parse(tokens) {
            Ok(parsed) => parsed,
            Err(message) => return self.client_error(message, noreply),
        };
        let (call, consumed) = match call {
            VectorCall::Update { op, elem, offset, .. } => {
                let fits = length <= limits.max_value_bytes;
                match self.data_block(input, length, fits, None, noreply) {
                    Ok(data) => (VectorCall::Update { op, elem, offset, data }, self.consumed + length + 2),
                    Err(decoded) => return decoded,
                }
            }
            other => (other, self.consumed),
        };
        let command = Command::Vector { key: Key::plain(tokens[1]), call, flags: 0, exptime: 0 };
        Decoded::Request { request: Request { command, style: ReplyStyle::Text { noreply } }, consumed }
    }

    fn touch(&self, limits: &Limits) -> Decoded<'a> {
        let (key, argument, noreply) = match self.key_and_argument(limits) {
            Ok(parts) => parts,
            Err(decoded) => return decoded,
        };
        let Some(exptime) = strtol32(argument) else {
            return self.client_error("invalid exptime argument", noreply);
        };
        self.ok(Command::Touch { key: Key::plain(key), exptime: i64::from(exptime) }, noreply)
    }

    fn flush_all(&self) -> Decoded<'a> {
        let (tokens, count) = self.tokens();
        if count > 3 {
            return self.error(ErrorReply::Error);
        }
        let noreply = noreply(&tokens[..count]);
        let mut delay = 0;
        if count != if noreply { 2 } else { 1 } {
            match strtol32(tokens[1]) {
                Some(value) => delay = i64::from(value),
                // Debian's memcached 1.6.18 answers this (newer sources say "bad command line format").
                None => return self.client_error("invalid exptime argument", noreply),
            }
        }
        self.ok(Command::FlushAll { delay }, noreply)
    }

    fn verbosity(&self) -> Decoded<'a> {
        let (tokens, count) = self.tokens();
        if !(2..=3).contains(&count) {
            return self.error(ErrorReply::Error);
        }
        // memcached reads the level with safe_strtoul; a trailing token is ignored.
        let noreply = noreply(&tokens[..count]);
        match strtoul32(tokens[1]) {
            Some(level) => self.ok(Command::Verbosity { level }, noreply),
            None => self.client_error(BAD_FORMAT, noreply),
        }
    }

    // ----- meta commands -----

    fn meta_ok(&self, command: Command<'a>, flag_tokens: &'a [u8]) -> Decoded<'a> {
        match parse_flags(flag_tokens) {
            Ok(flags) => {
                let request = Request { command, style: ReplyStyle::Meta(flags) };
                Decoded::Request { request, consumed: self.consumed }
            }
            Err(message) => self.client_error(message, false),
        }
    }

    /// Key and flag tokens of a meta line, with memcached's checks on both.
    fn meta_parts(&self, limits: &Limits, too_many: &'static str) -> Result<(&'a [u8], &'a [u8]), Decoded<'a>> {
        let (tokens, count) = self.tokens();
        if count < 2 {
            return Err(self.error(ErrorReply::Error));
        }
        if tokens[1].len() > limits.max_key_bytes {
            return Err(self.client_error(BAD_FORMAT, false));
        }
        if count > 2 + limits.max_meta_flags {
            return Err(self.client_error(too_many, false));
        }
        Ok((tokens[1], rest_after(self.bytes, 2)))
    }

    fn meta_key(&self, raw: &'a [u8], base64: bool, limits: &Limits) -> Result<Key<'a>, Decoded<'a>> {
        let key = Key { raw, base64 };
        let mut buffer = [0u8; 256];
        match key.decode_into(&mut buffer) {
            Some(decoded) if !decoded.is_empty() && decoded.len() <= limits.max_key_bytes => Ok(key),
            _ => Err(self.client_error("error decoding key", false)),
        }
    }

    /// Key and flags of mg, md and ma, with memcached's checks on the line, the flags, the
    /// opaque token and a base64 key. memcached answers md's and ma's flag and key-decoding
    /// errors (all but a too-long opaque) with one message, `flag_error`; mg's say what is wrong.
    fn meta_head(
        &self,
        limits: &Limits,
        too_many: &'static str,
        flag_error: Option<&'static str>,
    ) -> Result<(Key<'a>, MetaFlags<'a>), Decoded<'a>> {
        let (raw_key, flag_tokens) = self.meta_parts(limits, too_many)?;
        let flags =
            parse_flags(flag_tokens).map_err(|message| self.client_error(flag_error.unwrap_or(message), false))?;
        if flags.opaque().is_some_and(|o| o.len() + 1 > MAX_OPAQUE_BYTES) {
            return Err(self.client_error("opaque token too long", false));
        }
        let key = match (self.meta_key(raw_key, flags.base64(), limits), flag_error) {
            (Ok(key), _) => key,
            (Err(_), Some(message)) => return Err(self.client_error(message, false)),
            (Err(error), None) => return Err(error),
        };
        Ok((key, flags))
    }

    fn meta_get(&self, limits: &Limits) -> Decoded<'a> {
        let (key, flags) = match self.meta_head(limits, "options flags are too long", None) {
            Ok(head) => head,
            Err(decoded) => return decoded,
        };
        let command = Command::Get {
            keys: Keys::one(key.raw),
            return_cas: flags.has(b'c'),
            touch: flags.ttl(),
            base64: key.base64,
        };
        Decoded::Request { request: Request { command, style: ReplyStyle::Meta(flags) }, consumed: self.consumed }
    }

    fn meta_set(&self, input: &'a [u8], limits: &Limits) -> Decoded<'a> {
        let (tokens, count) = self.tokens();
        if count < 2 {
            return self.error(ErrorReply::Error);
        }
        if tokens[1].len() > limits.max_key_bytes || count == 2 {
            return self.client_error(BAD_FORMAT, false);
        }
        if count > 2 + limits.max_meta_flags {
            return self.client_error("options flags too long", false);
        }
        let length = match strtol32(tokens[2]) {
            Some(length) if (0..=i32::MAX - 2).contains(&length) => length as usize,
            _ => return self.client_error(BAD_FORMAT, false),
        };
        // From here on memcached knows the data length, so errors swallow the data block.
        let swallow = |message: &'static str| {
            Decoded::Error(ProtocolError::new(ErrorReply::Client(message), self.consumed + length + 2))
        };
        let flag_tokens = rest_after(self.bytes, 3);
        let flags = match parse_flags(flag_tokens) {
            Ok(flags) => flags,
            Err(message) => return swallow(message),
        };
        if flags.opaque().is_some_and(|o| o.len() + 1 > MAX_OPAQUE_BYTES) {
            return swallow("opaque token too long");
        }
        // memcached decodes the key before it looks at the mode.
        let key = match self.meta_key(tokens[1], flags.base64(), limits) {
            Ok(key) => key,
            Err(_) => return swallow("error decoding key"),
        };
        let mut mode = match flags.mode() {
            None | Some(b'S' | b's') => StoreMode::Set,
            Some(b'E' | b'e') => StoreMode::Add,
            Some(b'A' | b'a') => StoreMode::Append,
            Some(b'P' | b'p') => StoreMode::Prepend,
            Some(b'R' | b'r') => StoreMode::Replace,
            Some(_) => return swallow("invalid mode for ms M token"),
        };
        if flags.cas().is_some() && matches!(mode, StoreMode::Set | StoreMode::Replace) {
            mode = StoreMode::Cas;
        }
        // memcached unlinks the old item when any ms is refused as too large.
        let unlink = Some(KeySpan::of(input, key.raw, key.base64));
        let fits = limits.item_fits(key.raw.len(), flags.client_flags().unwrap_or(0), length);
        let value = match self.data_block(input, length, fits, unlink, false) {
            Ok(value) => value,
            Err(decoded) => return decoded,
        };
        let command = Command::Store {
            mode,
            key,
            flags: flags.client_flags().unwrap_or(0),
            exptime: flags.ttl().unwrap_or(0),
            value,
            cas: flags.cas().unwrap_or(0),
        };
        let request = Request { command, style: ReplyStyle::Meta(flags) };
        Decoded::Request { request, consumed: self.consumed + length + 2 }
    }

    fn meta_delete(&self, limits: &Limits) -> Decoded<'a> {
        let (key, flags) = match self.meta_head(limits, "options flags too long", Some(MD_MA_FLAG_ERROR)) {
            Ok(head) => head,
            Err(decoded) => return decoded,
        };
        let command = Command::Delete { key, cas: flags.cas().unwrap_or(0) };
        Decoded::Request { request: Request { command, style: ReplyStyle::Meta(flags) }, consumed: self.consumed }
    }

    fn meta_arith(&self, limits: &Limits) -> Decoded<'a> {
        let (key, flags) = match self.meta_head(limits, "options flags too long", Some(MD_MA_FLAG_ERROR)) {
            Ok(head) => head,
            Err(decoded) => return decoded,
        };
        let decrement = match flags.mode() {
            None | Some(b'I' | b'i' | b'+') => false,
            Some(b'D' | b'd' | b'-') => true,
            Some(_) => return self.client_error("invalid mode for ma M token", false),
        };
        let initial = flags.vivify_ttl().map(|exptime| ArithInitial { value: flags.initial().unwrap_or(0), exptime });
        let command = Command::Arith {
            key,
            delta: flags.delta().unwrap_or(1),
            decrement,
            initial,
            cas: flags.cas().unwrap_or(0),
        };
        Decoded::Request { request: Request { command, style: ReplyStyle::Meta(flags) }, consumed: self.consumed }
    }

    fn meta_debug(&self, limits: &Limits) -> Decoded<'a> {
        let (tokens, count) = self.tokens();
        if count < 2 || tokens[1].len() > limits.max_key_bytes {
            return self.client_error(BAD_FORMAT, false);
        }
        let base64 = count >= 3 && tokens[2] == b"b";
        let key = match self.meta_key(tokens[1], base64, limits) {
            Ok(key) => key,
            Err(_) => return self.client_error(BAD_FORMAT, false),
        };
        let request = Request { command: Command::MetaDebug { key }, style: ReplyStyle::Meta(Default::default()) };
        Decoded::Request { request, consumed: self.consumed }
    }
}
