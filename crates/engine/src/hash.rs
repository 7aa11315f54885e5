//! The key hash: the one function that decides where a key lives.
//!
//! ```text
//!   h = xxh3_64(key, seed 0)
//!
//!   63            48 47                             16 15            0
//!  +----------------+---------------------------------+---------------+
//!  | partition bits |           bucket bits           |      tag      |
//!  +----------------+---------------------------------+---------------+
//!
//!   partition = ((h >> 48) * n) >> 16        for n partitions, 1 <= n <= 65536
//!   bucket    = (h >> 16) & (buckets - 1)    buckets is a power of two
//!   tag       = h & 0xFFFF, with 0 mapped to 1 (0 marks an empty index entry)
//! ```
//!
//! Clients compute the same partition to send a key straight to the core that owns it (MICA's
//! client-assisted request direction), so this split must never change silently.

use xxhash_rust::xxh3::xxh3_64;

/// The largest partition count the split supports (16 bits of the hash select it).
pub(crate) const MAX_PARTITIONS: u32 = 1 << 16;

/// A key's 64-bit hash with accessors for MICA's partition / bucket / tag split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyHash(pub u64);

impl KeyHash {
    /// Hashes `key` with xxh3-64, seed 0.
    #[inline]
    pub fn of(key: &[u8]) -> KeyHash {
        KeyHash(xxh3_64(key))
    }

    /// The partition (0..partitions) that owns this key.
    #[inline]
    pub fn partition(self, partitions: u32) -> u32 {
        assert!((1..=MAX_PARTITIONS).contains(&partitions));
        (((self.0 >> 48) * u64::from(partitions)) >> 16) as u32
    }

    /// The index bucket for a table of `buckets` buckets (a power of two).
    #[inline]
    pub fn bucket(self, buckets: usize) -> usize {
        debug_assert!(buckets.is_power_of_two());
        ((self.0 >> 16) as usize) & (buckets - 1)
    }

    /// The 16-bit tag stored beside the log offset; never 0.
    #[inline]
    pub fn tag(self) -> u16 {
        let tag = (self.0 & 0xFFFF) as u16;
        if tag == 0 {
            1
        } else {
            tag
        }
    }
}

/// The partition (0..partitions) that owns `key`: what a partition-aware client computes.
#[inline]
pub fn partition_of(key: &[u8], partitions: u32) -> u32 {
    KeyHash::of(key).partition(partitions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_xxh3_seed_zero() {
        // Reference values of XXH3_64bits (seed 0) from the xxHash test vectors.
        assert_eq!(KeyHash::of(b"").0, 0x2D06_8005_38D3_94C2);
        assert_eq!(KeyHash::of(b"a").0, xxhash_rust::xxh3::xxh3_64_with_seed(b"a", 0));
    }

    #[test]
    fn split_uses_the_documented_bits() {
        let h = KeyHash(0xABCD_1234_5678_0000);
        assert_eq!(h.tag(), 1, "tag 0 is reserved for empty entries");
        assert_eq!(KeyHash(0xABCD_1234_5678_9ABC).tag(), 0x9ABC);
        assert_eq!(KeyHash(0xABCD_1234_5678_9ABC).bucket(1 << 12), 0x678);
        assert_eq!(KeyHash(0xFFFF_0000_0000_0000).partition(3), 2);
        assert_eq!(KeyHash(0x0000_FFFF_FFFF_FFFF).partition(3), 0);
        assert_eq!(KeyHash(0x8000_0000_0000_0000).partition(2), 1);
        assert_eq!(KeyHash(0x7FFF_0000_0000_0000).partition(2), 0);
        assert_eq!(KeyHash(0xFFFF_0000_0000_0000).partition(MAX_PARTITIONS), 0xFFFF);
    }

    #[test]
    fn partitions_spread_evenly() {
        let n = 7u32;
        let mut counts = [0u32; 7];
        for i in 0..70_000u32 {
            counts[partition_of(&i.to_le_bytes(), n) as usize] += 1;
        }
        for c in counts {
            assert!((9_000..11_000).contains(&c), "uneven partition counts {counts:?}");
        }
    }
}
