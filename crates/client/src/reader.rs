//! Reads a round of pipelined replies: fed whatever bytes have arrived, it consumes the
//! complete replies, fills in each request's result and says how far it got. Shared by the
//! blocking and the async client; it does no I/O.

use crate::binary;
use crate::codec::{decode, line_reply, needed, retrieved, Expect, Op, ProtocolError, Reply, Retrieved};

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

    /// Parses what has arrived in `buf` into `results`: Ok(true) once every reply is in.
    pub(crate) fn read_from(
        &mut self,
        buf: &mut ReadBuf,
        ops: &[Op<'_>],
        results: &mut [Option<Reply>],
    ) -> Result<bool, ProtocolError> {
        let used = self.feed(buf.pending(), ops, results)?;
        buf.consume(used);
        match (self.done(), buf.pending()) {
            (false, _) => Ok(false),
            (true, []) => Ok(true),
            (true, _) => Err(ProtocolError("more reply bytes than requests".into())),
        }
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
            let Some((wire, used)) = decode(&buf[at..])? else { break };
            let raw = &buf[at..at + used];
            match expect {
                Expect::Line { op } => results[*op] = Some(line_reply(&wire, raw, None)?),
                Expect::Atomic { op, signed } => results[*op] = Some(line_reply(&wire, raw, Some(*signed))?),
                Expect::Values { ops: wanted } => self.value(retrieved(wire, raw)?, wanted, ops, results)?,
                Expect::Binary { op } => {
                    let response = binary::response(wire).ok_or_else(|| not_binary(raw))?;
                    results[*op] = Some(binary::reply_for(&ops[*op], &response));
                }
                Expect::BinaryGets { ops: wanted } => {
                    let response = binary::response(wire).ok_or_else(|| not_binary(raw))?;
                    self.binary_get(response, wanted, ops, results)?;
                }
            }
            if matches!(expect, Expect::Line { .. } | Expect::Atomic { .. } | Expect::Binary { .. }) {
                self.next += 1;
            }
            at += used;
        }
        Ok(at)
    }

    /// One response to a batch of quiet gets: a hit, or the `NOOP` that ends the batch.
    fn binary_get(
        &mut self,
        response: binary::Response<'_>,
        wanted: &[usize],
        ops: &[Op<'_>],
        results: &mut [Option<Reply>],
    ) -> Result<(), ProtocolError> {
        if binary::is_noop(&response) {
            for &op in wanted {
                results[op].get_or_insert(Reply::Miss);
            }
            self.next += 1;
            return Ok(());
        }
        let op = response.opaque as usize;
        if !wanted.contains(&op) || (response.status == 0 && response.key != ops[op].key()) {
            return Err(ProtocolError(format!("a binary response for request {op}, not asked for")));
        }
        results[op] = Some(binary::reply_for(&ops[op], &response));
        Ok(())
    }

    /// One element of a retrieval reply; moves to the next expectation at its end.
    fn value(
        &mut self,
        element: Retrieved<'_>,
        wanted: &[usize],
        ops: &[Op<'_>],
        results: &mut [Option<Reply>],
    ) -> Result<(), ProtocolError> {
        let reply = match element {
            Retrieved::Value(key, item) => {
                let Some(found) = wanted[self.cursor..].iter().position(|&op| ops[op].key() == key) else {
                    let key = String::from_utf8_lossy(key);
                    return Err(ProtocolError(format!("a value for {key:?}, not asked for")));
                };
                for &op in &wanted[self.cursor..self.cursor + found] {
                    results[op] = Some(Reply::Miss);
                }
                results[wanted[self.cursor + found]] = Some(Reply::Hit(item));
                self.cursor += found + 1;
                return Ok(());
            }
            Retrieved::End => Reply::Miss,
            Retrieved::Error(error) => error,
        };
        for &op in &wanted[self.cursor..] {
            results[op] = Some(reply.clone());
        }
        self.cursor = 0;
        self.next += 1;
        Ok(())
    }
}

fn not_binary(raw: &[u8]) -> ProtocolError {
    let shown = String::from_utf8_lossy(&raw[..raw.len().min(64)]).into_owned();
    ProtocolError(format!("a text reply {shown:?} where a binary response was expected"))
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
        let need = needed(&self.buf[..self.end]).max(self.end + READ_CHUNK);
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

    /// A whole binary `STAT` reply (through the response with no key), taken out of the
    /// buffer and written as the text protocol's `STAT name value` lines and `END`.
    fn take_binary_stats(&mut self) -> Result<Option<String>, ProtocolError> {
        let mut text = String::new();
        let mut at = 0;
        while let Some((wire, used)) = decode(&self.pending()[at..])? {
            let response = binary::response(wire).ok_or_else(|| not_binary(&self.pending()[at..at + used]))?;
            at += used;
            if response.status != 0 {
                text = "ERROR\r\n".into();
                break;
            }
            if response.key.is_empty() {
                text.push_str("END\r\n");
                break;
            }
            let (name, value) = (String::from_utf8_lossy(response.key), String::from_utf8_lossy(response.value));
            text.push_str(&format!("STAT {name} {value}\r\n"));
        }
        if !text.ends_with("END\r\n") && !text.starts_with("ERROR") {
            return Ok(None);
        }
        self.consume(at);
        Ok(Some(text))
    }

    /// A whole `stats` reply (through `END` or an error line), taken out of the buffer.
    pub(crate) fn take_stats(&mut self, binary: bool) -> Result<Option<String>, ProtocolError> {
        if binary {
            return self.take_binary_stats();
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binary;
    use crate::codec::{Atomic, AtomicCode, Item, StoreMode};
    use crate::plan::{plan, Place};

    fn ops() -> Vec<Op<'static>> {
        vec![
            Op::Get(b"a"),
            Op::Get(b"b"),
            Op::Get(b"a"),
            Op::Store { mode: StoreMode::Set, key: b"c", value: b"v", flags: 0, exptime: 0 },
            Op::Atomic(Atomic { key: b"x", code: AtomicCode::Add, signed: true, operand: 1, operand2: 0 }),
            Op::Incr(b"n", 2),
            Op::Delete(b"d"),
            Op::Gets(b"g"),
            Op::Get(b"e"),
        ]
    }

    const REPLY: &[u8] = b"VALUE a 1 2\r\nxy\r\nVALUE a 1 2\r\nxy\r\nEND\r\nSTORED\r\nOK -1 0\r\n7\r\nNOT_FOUND\r\n\
VALUE g 0 0 55\r\n\r\nEND\r\nCLIENT_ERROR bad data chunk\r\n";

    fn expected() -> Vec<Option<Reply>> {
        let hit = |value: &[u8], flags, cas| Some(Reply::Hit(Item { value: value.to_vec(), flags, cas }));
        vec![
            hit(b"xy", 1, None),
            Some(Reply::Miss),
            hit(b"xy", 1, None),
            Some(Reply::Stored),
            Some(Reply::AtomicDone { old: u64::MAX, new: 0 }),
            Some(Reply::Number(7)),
            Some(Reply::NotFound),
            hit(b"", 0, Some(55)),
            Some(Reply::ServerError("CLIENT_ERROR bad data chunk".into())),
        ]
    }

    /// Feeds `reply` in pieces cut at `cuts`, as a socket might deliver it.
    fn read(ops: &[Op<'_>], reply: &[u8], cuts: &[usize]) -> Result<Vec<Option<Reply>>, ProtocolError> {
        read_as(ops, reply, cuts, false)
    }

    fn read_as(
        ops: &[Op<'_>],
        reply: &[u8],
        cuts: &[usize],
        binary: bool,
    ) -> Result<Vec<Option<Reply>>, ProtocolError> {
        let mut errors = vec![None; ops.len()];
        let place = Place { server: 0, addr: "127.0.0.1:1".parse().unwrap() };
        let groups = plan(ops, |_| Ok(place), &mut errors, binary);
        let round = &groups[0].rounds[0];
        let mut replies = vec![None; ops.len()];
        let mut reader = RoundReader::new(&round.expects);
        let mut pending = Vec::new();
        let mut from = 0;
        for &cut in cuts.iter().chain(std::iter::once(&reply.len())) {
            pending.extend_from_slice(&reply[from..cut]);
            from = cut;
            let used = reader.feed(&pending, ops, &mut replies)?;
            pending.drain(..used);
        }
        if !reader.done() || !pending.is_empty() {
            return Err(ProtocolError("replies missing or left over".into()));
        }
        Ok(replies)
    }

    #[test]
    fn replies_read_the_same_however_they_arrive() {
        let ops = ops();
        assert_eq!(read(&ops, REPLY, &[]).unwrap(), expected());
        for cut in 0..REPLY.len() {
            assert_eq!(read(&ops, REPLY, &[cut]).unwrap(), expected(), "cut at {cut}");
        }
        let every_byte: Vec<usize> = (1..REPLY.len()).collect();
        assert_eq!(read(&ops, REPLY, &every_byte).unwrap(), expected());
    }

    /// A binary response: opcode, status, opaque, extras, key, value.
    fn response(opcode: u8, status: u16, opaque: u32, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
        let mut out = vec![0x81, opcode];
        out.extend_from_slice(&(key.len() as u16).to_be_bytes());
        out.extend_from_slice(&[extras.len() as u8, 0]);
        out.extend_from_slice(&status.to_be_bytes());
        out.extend_from_slice(&((extras.len() + key.len() + value.len()) as u32).to_be_bytes());
        out.extend_from_slice(&opaque.to_be_bytes());
        out.extend_from_slice(&9u64.to_be_bytes());
        [out, extras.to_vec(), key.to_vec(), value.to_vec()].concat()
    }

    #[test]
    fn binary_replies_read_the_same_however_they_arrive() {
        let set = Op::Store { mode: StoreMode::Add, key: b"c", value: b"v", flags: 0, exptime: 0 };
        let ops = [Op::Get(b"a"), Op::Gets(b"b"), Op::Get(b"z"), set, Op::Incr(b"n", 1), Op::Delete(b"d")];
        let reply = [
            response(0x0d, 0, 1, &5u32.to_be_bytes(), b"b", b"xy"),
            response(0x0a, 0, u32::MAX, &[], &[], &[]),
            response(0x02, 2, 3, &[], &[], b"Data exists for key."),
            response(0x05, 0, 4, &[], &[], &8u64.to_be_bytes()),
            response(0x04, 1, 5, &[], &[], b"Not found"),
        ]
        .concat();
        let expected = vec![
            Some(Reply::Miss),
            Some(Reply::Hit(Item { value: b"xy".to_vec(), flags: 5, cas: Some(9) })),
            Some(Reply::Miss),
            Some(Reply::NotStored),
            Some(Reply::Number(8)),
            Some(Reply::NotFound),
        ];
        for cut in 0..reply.len() {
            assert_eq!(read_as(&ops, &reply, &[cut], true).unwrap(), expected, "cut at {cut}");
        }
        let stray = [response(0x0d, 0, 3, &[0; 4], b"c", b""), response(0x0a, 0, 0, &[], &[], &[])].concat();
        assert!(read_as(&ops[..3], &stray, &[], true).is_err(), "a hit for a request not asked");
        let mut request = Vec::new();
        binary::encode_get(&mut request, 0, b"k");
        assert!(read_as(&ops[..1], &request, &[], true).is_err(), "a request is not a response");
    }

    #[test]
    fn replies_out_of_step_are_protocol_errors() {
        let ops = [Op::Get(b"a"), Op::Delete(b"a")];
        for reply in [
            &b"VALUE z 0 1\r\nx\r\nEND\r\nDELETED\r\n"[..],
            b"VALUE a 0 1\r\nxyz\r\nEND\r\nDELETED\r\n",
            b"VALUE a zero 1\r\nx\r\nEND\r\nDELETED\r\n",
            b"END\r\nWHAT\r\n",
        ] {
            assert!(read(&ops, reply, &[]).is_err(), "{}", String::from_utf8_lossy(reply));
        }
        let long = vec![b'x'; 9000];
        let mut reader_ops = vec![None; 2];
        let expects = [crate::codec::Expect::Line { op: 1 }];
        assert!(RoundReader::new(&expects).feed(&long, &ops, &mut reader_ops).is_err());
    }

    #[test]
    fn the_read_buffer_grows_for_a_whole_value_and_no_further() {
        let mut buf = ReadBuf::new();
        let header = b"VALUE k 0 1000000\r\n";
        buf.space().unwrap()[..header.len()].copy_from_slice(header);
        buf.filled(header.len());
        assert!(buf.space().unwrap().len() >= 1_000_002);
        // A value over the 1 GiB limit is a protocol error, and the buffer does not grow for it.
        let mut huge = ReadBuf::new();
        let header = b"VALUE k 0 99999999999\r\n";
        huge.space().unwrap()[..header.len()].copy_from_slice(header);
        huge.filled(header.len());
        assert!(huge.space().unwrap().len() < 1 << 20);
        assert!(decode(huge.pending()).is_err());
    }
}
