//! The sets' DRAM state in the snapshot a clean close writes: every set's version and item
//! count, then every set's Bloom filter. The pages stay on flash; hit bits start clear.
//!
//! ```text
//!   0 magic u64 "TKVSETS1" | 8 length u64 (bytes of this section) | 16 sets u32
//!  20 bloom bytes u32 | 24 zero u64 | 32 per set: version u16 | count u8
//!  then every set's Bloom filter
//! ```

use super::Sets;
use crate::flash::RecoveryError;

const MAGIC: u64 = u64::from_le_bytes(*b"TKVSETS2");

impl Sets {
    /// The section's bytes.
    pub(crate) fn save(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(32 + self.versions.len() * 3 + self.blooms.len());
        out.extend_from_slice(&MAGIC.to_le_bytes());
        out.extend_from_slice(&0u64.to_le_bytes());
        out.extend_from_slice(&self.geo.sets.to_le_bytes());
        out.extend_from_slice(&(self.geo.bloom.bytes() as u32).to_le_bytes());
        out.extend_from_slice(&0u64.to_le_bytes());
        for (s, v) in self.versions.iter().enumerate() {
            out.extend_from_slice(&v.to_le_bytes());
            out.push(self.count(s as u32));
        }
        out.extend_from_slice(&self.blooms);
        let len = out.len() as u64;
        out[8..16].copy_from_slice(&len.to_le_bytes());
        out
    }

    /// Restores the section `save` wrote for this very geometry.
    pub(crate) fn load(&mut self, bytes: &[u8]) -> Result<(), RecoveryError> {
        let bad = || RecoveryError::SetsSnapshot;
        let n = self.versions.len();
        let expected = 32 + n * 3 + self.blooms.len();
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        if bytes.len() < expected || u64_at(0) != MAGIC || u64_at(8) != expected as u64 {
            return Err(bad());
        }
        if u32_at(16) != self.geo.sets || u32_at(20) as usize != self.geo.bloom.bytes() {
            return Err(bad());
        }
        for i in 0..n {
            let at = 32 + i * 3;
            self.versions[i] = u16::from_le_bytes([bytes[at], bytes[at + 1]]);
            self.state[i] = u32::from(bytes[at + 2]) << super::COUNT_SHIFT;
        }
        self.blooms.copy_from_slice(&bytes[32 + n * 3..expected]);
        // A voided set whose page may still hold keys is rewritten before the next retirement
        // (the marks that changed them since are in the log, which retires).
        let b = self.geo.bloom.bytes();
        for s in 0..n {
            if self.versions[s] == 0 && self.blooms[s * b..(s + 1) * b].iter().any(|&x| x != 0) {
                let (bucket, tag) = (s as u32 / self.geo.per_bucket, (s as u32 % self.geo.per_bucket) as u16);
                self.buried.push(0, bucket, tag);
            }
        }
        Ok(())
    }
}
