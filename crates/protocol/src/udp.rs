//! memcached's UDP frame header: 8 bytes, four big-endian 16-bit fields, before every datagram.
//!
//! ```text
//!  0-1 request id | 2-3 sequence number | 4-5 datagrams in this message | 6-7 reserved (0)
//! ```

/// Bytes of the frame header.
pub const FRAME_BYTES: usize = 8;
/// The most bytes memcached puts in one reply datagram, frame header included.
pub const MAX_DATAGRAM_BYTES: usize = 1400;
/// Reply bytes per datagram after the frame header.
pub const MAX_PAYLOAD_BYTES: usize = MAX_DATAGRAM_BYTES - FRAME_BYTES;

/// One datagram's frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// The client's tag for the request.
    pub request_id: u16,
    /// This datagram's number in the reply.
    pub sequence: u16,
    /// Datagrams in the reply.
    pub datagrams: u16,
    /// Always 0.
    pub reserved: u16,
}

/// Why a request datagram is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// Shorter than the frame header: dropped silently.
    TooShort,
    /// A datagram count other than 1 (a request spread over several datagrams): dropped
    /// silently, as memcached 1.6 drops it.
    MultiPacket(FrameHeader),
}

impl FrameHeader {
    /// Reads the header at the front of a datagram; returns it and the payload.
    pub fn decode(datagram: &[u8]) -> Result<(FrameHeader, &[u8]), FrameError> {
        let bytes = datagram.first_chunk::<FRAME_BYTES>().ok_or(FrameError::TooShort)?;
        let field = |at: usize| u16::from_be_bytes([bytes[at], bytes[at + 1]]);
        let header = FrameHeader { request_id: field(0), sequence: field(2), datagrams: field(4), reserved: field(6) };
        Ok((header, &datagram[FRAME_BYTES..]))
    }

    /// Reads a request datagram, refusing what memcached 1.6 refuses: a datagram count other
    /// than 1 (the sequence number and the reserved field are ignored).
    pub fn decode_request(datagram: &[u8]) -> Result<(FrameHeader, &[u8]), FrameError> {
        let (header, payload) = FrameHeader::decode(datagram)?;
        if header.datagrams != 1 {
            return Err(FrameError::MultiPacket(header));
        }
        Ok((header, payload))
    }

    /// Appends the header to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        for field in [self.request_id, self.sequence, self.datagrams, self.reserved] {
            out.extend_from_slice(&field.to_be_bytes());
        }
    }
}

/// Bytes on the wire (frame headers included) of a reply of `reply_bytes` split as
/// `frame_reply` splits it.
pub fn framed_bytes(reply_bytes: usize) -> usize {
    reply_bytes + reply_bytes.div_ceil(MAX_PAYLOAD_BYTES) * FRAME_BYTES
}

/// Splits `reply` into datagrams of at most `MAX_DATAGRAM_BYTES`, each with its frame header
/// (the request's id, its sequence number and the count), appended to `out`; calls
/// `datagram(start, end)` with each one's range in `out`. An empty reply sends nothing. None
/// (and nothing appended) if the reply needs more than 65535 datagrams.
pub fn frame_reply(
    reply: &[u8],
    request_id: u16,
    out: &mut Vec<u8>,
    mut datagram: impl FnMut(usize, usize),
) -> Option<()> {
    let count = u16::try_from(reply.len().div_ceil(MAX_PAYLOAD_BYTES)).ok()?;
    for (sequence, chunk) in reply.chunks(MAX_PAYLOAD_BYTES).enumerate() {
        let start = out.len();
        FrameHeader { request_id, sequence: sequence as u16, datagrams: count, reserved: 0 }.encode(out);
        out.extend_from_slice(chunk);
        datagram(start, out.len());
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_round_trip_and_errors() {
        let header = FrameHeader { request_id: 0x1234, sequence: 2, datagrams: 3, reserved: 0 };
        let mut out = Vec::new();
        header.encode(&mut out);
        assert_eq!(out, [0x12, 0x34, 0, 2, 0, 3, 0, 0]);
        out.extend_from_slice(b"get a\r\n");
        assert_eq!(FrameHeader::decode(&out), Ok((header, &b"get a\r\n"[..])));
        assert_eq!(FrameHeader::decode_request(&out), Err(FrameError::MultiPacket(header)));
        assert_eq!(FrameHeader::decode(&out[..7]), Err(FrameError::TooShort));
        out[5] = 1;
        assert!(FrameHeader::decode_request(&out).is_ok());
        out[5] = 0;
        assert!(FrameHeader::decode_request(&out).is_err(), "memcached drops a count of 0 too");
    }

    #[test]
    fn replies_split_as_memcached_splits_them() {
        let reply: Vec<u8> = (0..5025u32).map(|i| i as u8).collect();
        let mut out = Vec::new();
        let mut datagrams = Vec::new();
        frame_reply(&reply, 9, &mut out, |start, end| datagrams.push((start, end))).unwrap();
        let sizes: Vec<usize> = datagrams.iter().map(|(s, e)| e - s).collect();
        // memcached 1.6.18 sends a 5000-byte value's reply (5025 bytes) as 1400, 1400, 1400, 857.
        assert_eq!(sizes, vec![1400, 1400, 1400, 857]);
        assert_eq!(out.len(), framed_bytes(reply.len()));
        let mut joined = Vec::new();
        for (i, (start, end)) in datagrams.iter().enumerate() {
            let (header, payload) = FrameHeader::decode(&out[*start..*end]).unwrap();
            assert_eq!(header, FrameHeader { request_id: 9, sequence: i as u16, datagrams: 4, reserved: 0 });
            joined.extend_from_slice(payload);
        }
        assert_eq!(joined, reply);
        let mut none = Vec::new();
        frame_reply(&[], 1, &mut none, |_, _| panic!("no datagram for an empty reply")).unwrap();
        assert!(none.is_empty() && framed_bytes(0) == 0);
        assert!(frame_reply(&vec![0; MAX_PAYLOAD_BYTES * 65536], 1, &mut none, |_, _| {}).is_none());
        assert!(none.is_empty());
    }
}
