//! Batched GET and SET that pay memory latency once per batch rather than once per key. MICA
//! pipelines prefetches a fixed distance ahead (bucket of request i+k, item of i+k/2); for the
//! batch sizes a server sees (tens of requests) prefetching in stages over the whole chunk does
//! the same job without the pipeline's cold start: every bucket is requested, then every item,
//! then requests execute in order with their lines already in cache.

use crate::hash::KeyHash;
use crate::cache::Partition;
use crate::types::{check_key, EngineError, Item};

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
}

/// What a partition kind provides for the batched operations (sealed: only this crate's
/// partitions implement it).
pub(crate) mod sealed {
    use crate::hash::KeyHash;
    use crate::types::{EngineError, Item};

    pub trait Hashed {
        /// Starts loading what GETs of these keys will read.
        fn prefetch_for_get(&self, hashes: &[KeyHash]);
        /// Starts loading what SETs of these keys will touch.
        fn prefetch_for_set(&self, hashes: &[KeyHash]);
        /// `get` of a checked key whose hash is known.
        fn get_hashed_item(&mut self, key: &[u8], hash: KeyHash) -> Result<Option<Item<'_>>, EngineError>;
        /// `set` of a checked key whose hash is known.
        fn set_hashed_item(
            &mut self,
            key: &[u8],
            hash: KeyHash,
            value: &[u8],
            flags: u32,
            exptime: i64,
        ) -> Result<u64, EngineError>;
    }
}

/// Batched GET and SET, for either partition kind (`use tierkv_engine::Batched` to call them).
pub trait Batched: sealed::Hashed + Sized {
    /// GETs every key in order, calling `on_result(i, result)` for key i before looking up
    /// key i + 1. Results equal those of `get` one key at a time.
    fn get_batch<K, F>(&mut self, keys: &[K], mut on_result: F)
    where
        K: AsRef<[u8]>,
        F: FnMut(usize, Result<Option<Item<'_>>, EngineError>),
    {
        in_chunks(
            self,
            keys,
            |key| key.as_ref(),
            |partition, hashes| partition.prefetch_for_get(hashes),
            |partition, i, key, hash| {
                let key = key.as_ref();
                on_result(i, check_key(key).and_then(|()| partition.get_hashed_item(key, hash)));
            },
        );
    }

    /// SETs every request in order, calling `on_result(i, cas or error)` for each. Results
    /// equal those of `set` one request at a time.
    fn set_batch<F>(&mut self, requests: &[SetRequest<'_>], mut on_result: F)
    where
        F: FnMut(usize, Result<u64, EngineError>),
    {
        in_chunks(
            self,
            requests,
            |request| request.key,
            |partition, hashes| partition.prefetch_for_set(hashes),
            |partition, i, request, hash| {
                let result = check_key(request.key).and_then(|()| {
                    partition.set_hashed_item(request.key, hash, request.value, request.flags, request.exptime)
                });
                on_result(i, result);
            },
        );
    }
}

impl<T: sealed::Hashed> Batched for T {}

impl sealed::Hashed for Partition {
    fn prefetch_for_get(&self, hashes: &[KeyHash]) {
        self.prefetch_hashes(hashes);
    }

    fn prefetch_for_set(&self, hashes: &[KeyHash]) {
        for hash in hashes {
            self.prefetch_bucket(*hash, true);
        }
    }

    fn get_hashed_item(&mut self, key: &[u8], hash: KeyHash) -> Result<Option<Item<'_>>, EngineError> {
        Ok(self.get_hashed(key, hash))
    }

    fn set_hashed_item(
        &mut self,
        key: &[u8],
        hash: KeyHash,
        value: &[u8],
        flags: u32,
        exptime: i64,
    ) -> Result<u64, EngineError> {
        crate::ops::set(self, key, hash, value, flags, exptime, crate::ops::Prior::Unknown)
    }
}

/// The shape of every batched operation: for each chunk of up to `BATCH_CHUNK` requests, hash
/// the keys, let `prefetch` start loading what they need, then `execute` them in order with
/// their index in `requests` and their hash.
fn in_chunks<P, T>(
    partition: &mut P,
    requests: &[T],
    key: impl Fn(&T) -> &[u8],
    prefetch: impl Fn(&P, &[KeyHash]),
    mut execute: impl FnMut(&mut P, usize, &T, KeyHash),
) {
    for (chunk_no, chunk) in requests.chunks(BATCH_CHUNK).enumerate() {
        let mut hashes = [KeyHash(0); BATCH_CHUNK];
        for (hash, request) in hashes.iter_mut().zip(chunk) {
            *hash = KeyHash::of(key(request));
        }
        prefetch(partition, &hashes[..chunk.len()]);
        for (i, request) in chunk.iter().enumerate() {
            execute(partition, chunk_no * BATCH_CHUNK + i, request, hashes[i]);
        }
    }
}
