//! memcached's UDP frame header: 8 bytes, four big-endian 16-bit fields, before every datagram.
//!
//! ```text
//!  0-1 request id | 2-3 sequence number | 4-5 datagrams in this message | 6-7 reserved (0)
//! ```

/// Bytes of the frame header.
pub const FRAME_BYTES: usize = 8;

/// One datagram's frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    pub request_id: u16,
    pub sequence: u16,
    pub datagrams: u16,
    pub reserved: u16,
}

/// Why a request datagram is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// Shorter than the frame header: dropped silently.
    TooShort,
    /// A request spread over several datagrams: memcached answers
    /// `SERVER_ERROR multi-packet request not supported`.
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

    /// Reads a request datagram, refusing what memcached refuses.
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
    }
}
