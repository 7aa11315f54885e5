//! Reads a round of pipelined replies: fed whatever bytes have arrived, it consumes the
//! complete replies, fills in each request's result and says how far it got. Shared by the
//! blocking and the async client; it does no I/O.

use crate::codec::{parse_line, parse_retrieved, wanted, Expect, Op, ProtocolError, Reply, Retrieved};

/// Where in a round's expected replies the reading is.
pub(crate) struct RoundReader<'e> {
    expects: &'e [Expect],
    next: usize,
    /// Within a multi-key retrieval: the next of its requests a `VALUE` may answer.
    cursor: usize,
}

impl<'e> RoundReader<'e> {
    pub(crate) fn new(expects: &'e [Expect]) -> RoundReader<'e> {
        RoundReader { expects, next: 0, cursor: 0 }
    }

    /// Every reply has been read.
    pub(crate) fn done(&self) -> bool {
        self.next == self.expects.len()
    }

    /// Consumes the complete replies at the start of `buf` into `results` (indexed as `ops`);
    /// returns the bytes consumed.
    pub(crate) fn feed(
        &mut self,
        buf: &[u8],
        ops: &[Op<'_>],
        results: &mut [Option<Reply>],
    ) -> Result<usize, ProtocolError> {
        let mut at = 0;
        while let Some(expect) = self.expects.get(self.next) {
            let used = match expect {
                Expect::Line { op } | Expect::Atomic { op, .. } => {
                    let atomic = match expect {
                        Expect::Atomic { signed, .. } => Some(*signed),
                        _ => None,
                    };
                    parse_line(&buf[at..], atomic)?.map(|(reply, used)| {
                        results[*op] = Some(reply);
                        self.next += 1;
                        used
                    })
                }
                Expect::Values { ops: wanted, .. } => self.feed_values(&buf[at..], wanted, ops, results)?,
            };
            match used {
                Some(used) => at += used,
                None => break,
            }
        }
        Ok(at)
    }

    /// One element of a retrieval reply; moves to the next expectation at its end.
    fn feed_values(
        &mut self,
        buf: &[u8],
        wanted: &[usize],
        ops: &[Op<'_>],
        results: &mut [Option<Reply>],
    ) -> Result<Option<usize>, ProtocolError> {
        let Some((element, used)) = parse_retrieved(buf)? else { return Ok(None) };
        match element {
            Retrieved::Value(key, item) => {
                let key = &buf[key];
                let Some(found) = wanted[self.cursor..].iter().position(|&op| ops[op].key() == key) else {
                    return Err(ProtocolError(format!(
                        "a value for {:?}, not asked for",
                        String::from_utf8_lossy(key)
                    )));
                };
                for &op in &wanted[self.cursor..self.cursor + found] {
                    results[op] = Some(Reply::Miss);
                }
                results[wanted[self.cursor + found]] = Some(Reply::Hit(item));
                self.cursor += found + 1;
            }
            Retrieved::End | Retrieved::Error(_) => {
                let reply = match element {
                    Retrieved::Error(error) => error,
                    _ => Reply::Miss,
                };
                for &op in &wanted[self.cursor..] {
                    results[op] = Some(reply.clone());
                }
                self.cursor = 0;
                self.next += 1;
            }
        }
        Ok(Some(used))
    }
}

/// The largest reply block read (a value of up to 1 GiB and its header).
const MAX_BLOCK: usize = (1 << 30) + (64 << 10);
/// Bytes read at a time.
const READ_CHUNK: usize = 64 << 10;

/// A connection's read buffer: bytes received and not yet parsed.
pub(crate) struct ReadBuf {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl ReadBuf {
    pub(crate) fn new() -> ReadBuf {
        ReadBuf { buf: vec![0; READ_CHUNK], start: 0, end: 0 }
    }

    /// Received, not yet parsed.
    pub(crate) fn pending(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// `used` bytes were parsed.
    pub(crate) fn consume(&mut self, used: usize) {
        self.start += used;
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        }
    }

    /// Where the next read goes: room for a whole value when a `VALUE` header waits for it.
    pub(crate) fn space(&mut self) -> Result<&mut [u8], ProtocolError> {
        self.buf.copy_within(self.start..self.end, 0);
        self.end -= self.start;
        self.start = 0;
        let need = wanted(&self.buf[..self.end]).unwrap_or(0).max(self.end + READ_CHUNK);
        if need > MAX_BLOCK {
            return Err(ProtocolError(format!("a reply of {need} bytes")));
        }
        if self.buf.len() < need {
            self.buf.resize(need, 0);
        }
        Ok(&mut self.buf[self.end..])
    }

    /// `n` bytes were read into `space()`.
    pub(crate) fn filled(&mut self, n: usize) {
        self.end += n;
    }

    /// A whole `stats` reply (through `END` or an error line), taken out of the buffer.
    pub(crate) fn take_stats(&mut self) -> Result<Option<String>, ProtocolError> {
        let text = self.pending();
        let complete = text.ends_with(b"END\r\n") || text.ends_with(b"ERROR\r\n");
        if complete || (text.starts_with(b"CLIENT_ERROR") && text.ends_with(b"\r\n")) {
            let reply = String::from_utf8_lossy(text).into_owned();
            self.consume(text.len());
            return Ok(Some(reply));
        }
        if text.len() > 1 << 20 {
            return Err(ProtocolError("a stats reply over 1 MiB".into()));
        }
        Ok(None)
    }
}
