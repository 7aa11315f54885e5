//! Standard base64 (RFC 4648, with padding), for meta keys flagged `b`.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn value_of(symbol: u8) -> Option<u32> {
    match symbol {
        b'A'..=b'Z' => Some(u32::from(symbol - b'A')),
        b'a'..=b'z' => Some(u32::from(symbol - b'a') + 26),
        b'0'..=b'9' => Some(u32::from(symbol - b'0') + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    }
}

/// Decodes `text` into `out`; returns the decoded length, or None if `text` is not canonical
/// padded base64, is empty, or does not fit.
pub fn decode(text: &[u8], out: &mut [u8]) -> Option<usize> {
    if text.is_empty() || !text.len().is_multiple_of(4) {
        return None;
    }
    let mut written = 0;
    let quads = text.len() / 4;
    for (index, quad) in text.chunks_exact(4).enumerate() {
        let last = index + 1 == quads;
        let padding = if last { quad.iter().rev().take_while(|&&b| b == b'=').count() } else { 0 };
        if padding > 2 {
            return None;
        }
        let mut bits = 0u32;
        for &symbol in &quad[..4 - padding] {
            bits = (bits << 6) | value_of(symbol)?;
        }
        bits <<= 6 * padding as u32;
        let bytes = [(bits >> 16) as u8, (bits >> 8) as u8, bits as u8];
        let count = 3 - padding;
        out.get_mut(written..written + count)?.copy_from_slice(&bytes[..count]);
        written += count;
    }
    Some(written)
}

/// Appends the base64 form of `data` to `out`.
pub fn encode(data: &[u8], out: &mut Vec<u8>) {
    for chunk in data.chunks(3) {
        let bits = chunk.iter().enumerate().fold(0u32, |acc, (i, &b)| acc | u32::from(b) << (16 - 8 * i));
        let symbols = chunk.len() + 1;
        for i in 0..4 {
            if i < symbols {
                out.push(ALPHABET[(bits >> (18 - 6 * i) & 63) as usize]);
            } else {
                out.push(b'=');
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_garbage() {
        for data in [&b""[..], b"f", b"fo", b"foo", b"foob", b"fooba", b"foobar", &[0, 255, 10, 13, 32]] {
            let mut text = Vec::new();
            encode(data, &mut text);
            let mut out = [0u8; 16];
            if data.is_empty() {
                assert_eq!(decode(&text, &mut out), None);
            } else {
                assert_eq!(decode(&text, &mut out), Some(data.len()));
                assert_eq!(&out[..data.len()], data);
            }
        }
        let mut out = [0u8; 16];
        assert_eq!(decode(b"Zm9vYmFy", &mut out), Some(6));
        assert_eq!(&out[..6], b"foobar");
        assert_eq!(decode(b"Zm9", &mut out), None);
        assert_eq!(decode(b"Zm9v!A==", &mut out), None);
        assert_eq!(decode(b"Zm9vYmFy", &mut out[..5]), None, "does not fit");
    }
}
