//! Batched GET and SET with MICA's software pipeline: while request i executes, the bucket of
//! request i + PREFETCH_DISTANCE and the item of request i + PREFETCH_DISTANCE / 2 are already
//! on their way from memory, so a batch pays memory latency once rather than once per key.

use crate::hash::KeyHash;
use crate::partition::{check_key, EngineError, Item, Partition};

/// Keys hashed ahead at a time; bounds the stack space of a batch call.
pub const BATCH_CHUNK: usize = 64;
/// How many requests ahead the bucket prefetch runs (the item prefetch runs half as far).
pub const PREFETCH_DISTANCE: usize = 8;

/// One SET of a batch.
#[derive(Clone, Copy, Debug)]
pub struct SetRequest<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub flags: u32,
    /// memcached exptime.
    pub exptime: i64,
}

fn hash_chunk<K: AsRef<[u8]>>(keys: &[K]) -> [KeyHash; BATCH_CHUNK] {
    debug_assert!(keys.len() <= BATCH_CHUNK);
    let mut hashes = [KeyHash(0); BATCH_CHUNK];
    for (hash, key) in hashes.iter_mut().zip(keys) {
        *hash = KeyHash::of(key.as_ref());
    }
    hashes
}

impl Partition {
    /// GETs every key in order, calling `on_result(i, result)` for key i before looking up
    /// key i + 1. Results equal those of `get` one key at a time.
    pub fn get_batch<K, F>(&mut self, keys: &[K], mut on_result: F)
    where
        K: AsRef<[u8]>,
        F: FnMut(usize, Result<Option<Item<'_>>, EngineError>),
    {
        for (chunk_no, chunk) in keys.chunks(BATCH_CHUNK).enumerate() {
            let hashes = hash_chunk(chunk);
            let n = chunk.len();
            for hash in &hashes[..n.min(PREFETCH_DISTANCE)] {
                self.prefetch_bucket(*hash, false);
            }
            for i in 0..n {
                if let Some(hash) = hashes[..n].get(i + PREFETCH_DISTANCE) {
                    self.prefetch_bucket(*hash, false);
                }
                if let Some(hash) = hashes[..n].get(i + PREFETCH_DISTANCE / 2) {
                    self.prefetch_item(*hash);
                }
                let key = chunk[i].as_ref();
                let result = check_key(key).map(|()| self.get_hashed(key, hashes[i]));
                on_result(chunk_no * BATCH_CHUNK + i, result);
            }
        }
    }

    /// SETs every request in order, calling `on_result(i, cas or error)` for each. Results
    /// equal those of `set` one request at a time.
    pub fn set_batch<F>(&mut self, requests: &[SetRequest<'_>], mut on_result: F)
    where
        F: FnMut(usize, Result<u64, EngineError>),
    {
        for (chunk_no, chunk) in requests.chunks(BATCH_CHUNK).enumerate() {
            let mut hashes = [KeyHash(0); BATCH_CHUNK];
            for (hash, request) in hashes.iter_mut().zip(chunk) {
                *hash = KeyHash::of(request.key);
            }
            let n = chunk.len();
            for hash in &hashes[..n.min(PREFETCH_DISTANCE)] {
                self.prefetch_bucket(*hash, true);
            }
            for (i, request) in chunk.iter().enumerate() {
                if let Some(hash) = hashes[..n].get(i + PREFETCH_DISTANCE) {
                    self.prefetch_bucket(*hash, true);
                }
                let result = check_key(request.key).and_then(|()| {
                    self.set_hashed(request.key, hashes[i], request.value, request.flags, request.exptime)
                });
                on_result(chunk_no * BATCH_CHUNK + i, result);
            }
        }
    }
}
