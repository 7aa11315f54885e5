//! Batched GET and SET that pay memory latency once per batch rather than once per key. MICA
//! pipelines prefetches a fixed distance ahead (bucket of request i+k, item of i+k/2); for the
//! batch sizes a server sees (tens of requests) prefetching in stages over the whole chunk does
//! the same job without the pipeline's cold start: every bucket is requested, then every item,
//! then requests execute in order with their lines already in cache.

use crate::hash::KeyHash;
use crate::partition::{check_key, EngineError, Item, Partition};

/// Keys hashed ahead at a time; bounds the stack space of a batch call.
pub const BATCH_CHUNK: usize = 64;

/// One SET of a batch.
#[derive(Clone, Copy, Debug)]
pub struct SetRequest<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub flags: u32,
    /// memcached exptime.
    pub exptime: i64,
}

impl Partition {
    /// Starts loading, for up to `BATCH_CHUNK` keys, first their index buckets and then their
    /// items, so the operations that follow find them in cache. Changes nothing. For callers
    /// that execute mixed requests in order themselves (the server's turn).
    pub fn prefetch_keys(&self, keys: &[&[u8]]) {
        let keys = &keys[..keys.len().min(BATCH_CHUNK)];
        let mut hashes = [KeyHash(0); BATCH_CHUNK];
        for (hash, key) in hashes.iter_mut().zip(keys) {
            *hash = KeyHash::of(key);
        }
        self.prefetch_hashes(&hashes[..keys.len()]);
    }

    /// `prefetch_keys` for keys already hashed (at most `BATCH_CHUNK` of them are used).
    pub fn prefetch_hashes(&self, hashes: &[KeyHash]) {
        let hashes = &hashes[..hashes.len().min(BATCH_CHUNK)];
        for hash in hashes {
            self.prefetch_bucket(*hash, false);
        }
        for hash in hashes {
            self.prefetch_item(*hash);
        }
    }

    /// GETs every key in order, calling `on_result(i, result)` for key i before looking up
    /// key i + 1. Results equal those of `get` one key at a time.
    pub fn get_batch<K, F>(&mut self, keys: &[K], mut on_result: F)
    where
        K: AsRef<[u8]>,
        F: FnMut(usize, Result<Option<Item<'_>>, EngineError>),
    {
        for (chunk_no, chunk) in keys.chunks(BATCH_CHUNK).enumerate() {
            // Stage 1: hash every key and start loading its bucket.
            let mut hashes = [KeyHash(0); BATCH_CHUNK];
            for (hash, key) in hashes.iter_mut().zip(chunk) {
                *hash = KeyHash::of(key.as_ref());
                self.prefetch_bucket(*hash, false);
            }
            // Stage 2: buckets have arrived (or are close); start loading the items.
            for hash in &hashes[..chunk.len()] {
                self.prefetch_item(*hash);
            }
            // Stage 3: execute in order.
            for (i, key) in chunk.iter().enumerate() {
                let key = key.as_ref();
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
                self.prefetch_bucket(*hash, true);
            }
            for (i, request) in chunk.iter().enumerate() {
                let result = check_key(request.key).and_then(|()| {
                    self.set_hashed(request.key, hashes[i], request.value, request.flags, request.exptime)
                });
                on_result(chunk_no * BATCH_CHUNK + i, result);
            }
        }
    }
}
