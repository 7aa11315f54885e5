//! Batched GET and SET that pay memory latency once per batch rather than once per key. MICA
//! pipelines prefetches a fixed distance ahead (bucket of request i+k, item of i+k/2); for the
//! batch sizes a server sees (tens of requests) prefetching in stages over the whole chunk does
//! the same job without the pipeline's cold start: every bucket is requested, then every item,
//! then requests execute in order with their lines already in cache. `Engine::get_batch` and
//! `Engine::set_batch` are written over `in_chunks`.

use crate::hash::KeyHash;

/// Keys hashed ahead at a time; bounds the stack space of a batch call.
pub const BATCH_CHUNK: usize = 64;

/// One SET of a batch.
#[derive(Clone, Copy, Debug)]
pub struct SetRequest<'a> {
    /// The key.
    pub key: &'a [u8],
    /// The value.
    pub value: &'a [u8],
    /// memcached's client flags.
    pub flags: u32,
    /// memcached exptime.
    pub exptime: i64,
}

/// The shape of every batched operation: for each chunk of up to `BATCH_CHUNK` requests, hash
/// the keys, let `prefetch` start loading what they need, then `execute` them in order with
/// their index in `requests` and their hash.
pub(crate) fn in_chunks<P, T>(
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
