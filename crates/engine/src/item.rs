//! The item layout in the circular log: a variable-length header that spends bytes only on the
//! fields an item actually uses, then the key, then the value. Items are byte-aligned; no
//! padding is ever added.
//!
//! ```text
//!  byte 0   control   7   6   5   4   3   2   1  0
//!                     +---+---+---+---+---+---+-----+
//!                     | H | S | W | C | E | F | L-1 |   L = bytes of the value length (1..=4)
//!                     +---+---+---+---+---+---+-----+   F/E/C: flags / expiry / CAS field present
//!                                                       H/S/W: fetched / stale / token sent
//!  byte 1   key length (1..=250)
//!  L bytes  value length, little endian
//!  [4 bytes flags]    when F: memcached's client flags (absent = 0)
//!  [4 bytes expiry]   when E: absolute Unix seconds (absent = never expires)
//!  [8 bytes cas]      when C: explicit CAS (absent = derived from the item's log position)
//!  key bytes, value bytes
//! ```
//!
//! A fresh item's CAS is its log position plus one, which is unique and increasing, so it costs
//! no bytes. An item copied forward by the LRU re-append keeps its CAS in the explicit field.
//!
//! H, S and W are memcached's per-item state for the meta protocol: fetched since stored (`h`),
//! marked stale by an invalidation (`X`), a recache token handed out (`W`/`Z`). They change in
//! place, one bit store into a line the read just brought into cache. A key length outside
//! 1..=250 catches a read from a wrong offset before it can return garbage.

/// The header of an item as stored in the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ItemHeader {
    pub(crate) key_len: usize,
    pub(crate) value_len: usize,
    pub(crate) flags: u32,
    /// Absolute Unix seconds; 0 = never.
    pub(crate) expiry: u32,
    /// Explicit CAS, or None when the CAS is the item's position plus one.
    pub(crate) cas: Option<u64>,
    /// The H/S/W state bits, in their control-byte positions.
    pub(crate) state: u8,
}

/// Fetched since stored (meta `h`).
pub(crate) const FETCHED: u8 = 1 << 7;
/// Marked stale by an invalidation (meta `X`).
pub(crate) const STALE: u8 = 1 << 6;
/// A recache token (meta `W`) was handed out; later readers see `Z`.
pub(crate) const TOKEN_SENT: u8 = 1 << 5;
pub(crate) const STATE_MASK: u8 = FETCHED | STALE | TOKEN_SENT;
const HAS_FLAGS: u8 = 1 << 2;
const HAS_EXPIRY: u8 = 1 << 3;
const HAS_CAS: u8 = 1 << 4;

/// Largest header: control, key length, 4-byte value length, flags, expiry, CAS.
#[cfg(test)]
pub(crate) const MAX_HEADER_BYTES: usize = 2 + 4 + 4 + 4 + 8;
/// Smallest header: control, key length, 1-byte value length.
pub(crate) const MIN_HEADER_BYTES: usize = 3;
/// Longest value the 4-byte length field can describe.
pub(crate) const MAX_ENCODABLE_VALUE: usize = u32::MAX as usize;

impl ItemHeader {
    fn value_len_bytes(&self) -> usize {
        match self.value_len {
            0..=0xFF => 1,
            0x100..=0xFFFF => 2,
            0x1_0000..=0xFF_FFFF => 3,
            _ => 4,
        }
    }

    /// Bytes of the encoded header.
    pub(crate) fn header_len(&self) -> usize {
        2 + self.value_len_bytes()
            + if self.flags != 0 { 4 } else { 0 }
            + if self.expiry != 0 { 4 } else { 0 }
            + if self.cas.is_some() { 8 } else { 0 }
    }

    /// Bytes of the whole item: header, key and value.
    pub(crate) fn total_len(&self) -> usize {
        self.header_len() + self.key_len + self.value_len
    }

    /// Offset of the expiry field within the header, if present.
    pub(crate) fn expiry_field(&self) -> Option<usize> {
        (self.expiry != 0).then(|| 2 + self.value_len_bytes() + if self.flags != 0 { 4 } else { 0 })
    }

    /// Writes the header into the front of `out`; returns its length.
    pub(crate) fn encode(&self, out: &mut [u8]) -> usize {
        assert!((1..=u8::MAX as usize).contains(&self.key_len));
        assert!(self.value_len <= MAX_ENCODABLE_VALUE);
        let value_len_bytes = self.value_len_bytes();
        let mut control = (self.state & STATE_MASK) | (value_len_bytes as u8 - 1);
        let mut at = 2;
        let value_len = (self.value_len as u32).to_le_bytes();
        out[at..at + value_len_bytes].copy_from_slice(&value_len[..value_len_bytes]);
        at += value_len_bytes;
        if self.flags != 0 {
            control |= HAS_FLAGS;
            out[at..at + 4].copy_from_slice(&self.flags.to_le_bytes());
            at += 4;
        }
        if self.expiry != 0 {
            control |= HAS_EXPIRY;
            out[at..at + 4].copy_from_slice(&self.expiry.to_le_bytes());
            at += 4;
        }
        if let Some(cas) = self.cas {
            control |= HAS_CAS;
            out[at..at + 8].copy_from_slice(&cas.to_le_bytes());
            at += 8;
        }
        out[0] = control;
        out[1] = self.key_len as u8;
        debug_assert_eq!(at, self.header_len());
        at
    }

    /// Reads a header from the front of `bytes`, which must start at an item written by
    /// `encode` (asserted through the key length); returns it with its encoded length.
    #[inline]
    pub(crate) fn decode(bytes: &[u8]) -> (ItemHeader, usize) {
        let (header, at) = ItemHeader::decode_unchecked(bytes);
        debug_assert_eq!(at, header.header_len());
        (header, at)
    }

    /// `decode` for bytes that may be torn (a reader racing the owner's writes): the fields
    /// may be nonsense, so their encoding is not checked against `encode`'s; the caller
    /// validates the copy before trusting anything read from it.
    #[inline]
    pub(crate) fn decode_unchecked(bytes: &[u8]) -> (ItemHeader, usize) {
        let control = bytes[0];
        let key_len = usize::from(bytes[1]);
        assert!((1..=250).contains(&key_len), "index points outside an item");
        let value_len_bytes = usize::from(control & 0b11) + 1;
        let value_len = match bytes.get(2..6) {
            // One unaligned 4-byte read, masked to the field's width.
            Some(word) => u32::from_le_bytes(word.try_into().unwrap()) & (u32::MAX >> (32 - 8 * value_len_bytes)),
            None => {
                let mut field = [0u8; 4];
                field[..value_len_bytes].copy_from_slice(&bytes[2..2 + value_len_bytes]);
                u32::from_le_bytes(field)
            }
        } as usize;
        let mut header = ItemHeader { key_len, value_len, flags: 0, expiry: 0, cas: None, state: control & STATE_MASK };
        let mut at = 2 + value_len_bytes;
        if control & (HAS_FLAGS | HAS_EXPIRY | HAS_CAS) != 0 {
            if control & HAS_FLAGS != 0 {
                header.flags = read_u32(bytes, at);
                at += 4;
            }
            if control & HAS_EXPIRY != 0 {
                header.expiry = read_u32(bytes, at);
                at += 4;
            }
            if control & HAS_CAS != 0 {
                header.cas = Some(u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()));
                at += 8;
            }
        }
        (header, at)
    }
}

#[inline]
fn read_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
}

/// Bytes an item with these sizes takes in the log (no flags, no expiry, implicit CAS).
pub fn item_log_bytes(key_len: usize, value_len: usize) -> usize {
    ItemHeader { key_len, value_len, flags: 0, expiry: 0, cas: None, state: 0 }.total_len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(h: ItemHeader) {
        let mut buf = [0u8; MAX_HEADER_BYTES];
        let n = h.encode(&mut buf);
        assert_eq!(n, h.header_len());
        assert_eq!(ItemHeader::decode(&buf), (h, n));
        assert_eq!(ItemHeader::decode(&buf[..n]), (h, n), "decodes without bytes beyond the header");
        if let Some(at) = h.expiry_field() {
            assert_eq!(read_u32(&buf, at), h.expiry);
        }
    }

    #[test]
    fn headers_round_trip_at_every_size_class() {
        for value_len in [0, 1, 255, 256, 65_535, 65_536, 0xFF_FFFF, 0x100_0000, 1 << 30] {
            for (flags, expiry, cas) in [(0, 0, None), (7, 0, None), (0, 99, Some(5)), (1, 2, Some(u64::MAX))] {
                for state in [0, FETCHED, STALE | TOKEN_SENT, STATE_MASK] {
                    round_trip(ItemHeader { key_len: 250, value_len, flags, expiry, cas, state });
                }
            }
        }
    }

    #[test]
    fn small_items_have_three_byte_headers() {
        assert_eq!(item_log_bytes(8, 8), 19);
        assert_eq!(item_log_bytes(16, 32), 51);
        assert_eq!(item_log_bytes(10, 300), 2 + 2 + 10 + 300);
        let full = ItemHeader { key_len: 1, value_len: 1 << 24, flags: 1, expiry: 1, cas: Some(1), state: STATE_MASK };
        assert_eq!(full.header_len(), MAX_HEADER_BYTES);
    }

    #[test]
    fn torn_headers_decode_unchecked_without_panicking() {
        // What a reader racing the owner may copy: a two-byte length holding a one-byte value,
        // and a flags bit over zero flags. `encode` never writes these; `decode_unchecked`
        // must still return (the reader's validation then throws the copy away).
        let mut torn = [0u8; MAX_HEADER_BYTES + 4];
        torn[0] = 1 | HAS_FLAGS;
        torn[1] = 8;
        torn[2] = 5;
        let (header, at) = ItemHeader::decode_unchecked(&torn);
        assert_eq!((header.key_len, header.value_len, header.flags, at), (8, 5, 0, 8));
        assert_ne!(at, header.header_len(), "the encoding is one encode would not write");
    }

    #[test]
    #[should_panic(expected = "index points outside an item")]
    fn garbage_is_refused() {
        ItemHeader::decode(&[0u8; 32]);
    }
}
