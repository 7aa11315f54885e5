//! memcached's data operations, written once over the primitives a partition kind provides
//! (`storage::Storage`): the cache-mode partition (circular log, lossy index) and the
//! store-mode one (allocator, lossless index) differ in how items are found, written and
//! removed, never in what the operations mean. `api.rs` puts them behind the `Engine` trait.

use crate::hash::KeyHash;
use crate::item::{self, ItemHeader};
use crate::numeric::{apply_delta, parse_counter, CounterValue};
use crate::storage::{NewValue, Prior, Storage};
use crate::time::expiry_from_exptime;
use crate::types::{
    ArithOutcome, ArithRequest, DeleteOutcome, EngineError, ItemDebug, MetaGet, MetaItem, StoreMode, StoreOutcome,
    StoreRequest,
};

/// memcached's delayed `flush_all`, the same for both partition kinds: a flush is due a second
/// before its deadline (memcached flushes items not newer than the deadline minus one), so a
/// delay of 1 flushes now; what is stored during the deadline second goes too; a new flush_all
/// replaces a pending one.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct FlushSchedule {
    at: Option<u32>,
}

impl FlushSchedule {
    /// A `flush_all` with `delay` at `now`: whether to flush at once.
    pub(crate) fn request(&mut self, delay: i64, now: u32) -> bool {
        if delay <= 0 {
            self.at = None;
            return true;
        }
        let at = expiry_from_exptime(delay, now).saturating_sub(1);
        self.at = Some(at);
        at <= now
    }

    /// The clock moved to `now`: whether a pending flush is due (every clock setting of the
    /// deadline second flushes again).
    pub(crate) fn on_clock(&mut self, now: u32) -> bool {
        let Some(at) = self.at else { return false };
        if now > at {
            self.at = None;
        }
        now >= at
    }

    /// The pending flush's deadline second, if any (kept across a flash tier's clean restart).
    pub(crate) fn pending(&self) -> Option<u32> {
        self.at
    }

    /// Schedules a flush at `at` (a pending one kept across a restart).
    pub(crate) fn resume(&mut self, at: u32) {
        self.at = Some(at);
    }

    /// Whether an item stored at `now` is hidden by a flush in its deadline second.
    pub(crate) fn hides_writes(&self, now: u32) -> bool {
        self.at == Some(now)
    }
}

/// Refuses an item larger than the partition takes.
pub(crate) fn check_size(max_item_bytes: usize, header: &ItemHeader) -> Result<(), EngineError> {
    let bytes = header.total_len();
    if bytes > max_item_bytes || header.value_len > item::MAX_ENCODABLE_VALUE {
        return Err(EngineError::ItemTooLarge { bytes, max_bytes: max_item_bytes });
    }
    Ok(())
}

/// set: stores unconditionally in place of `prior` (what the caller knows of the key's item);
/// returns the new CAS.
#[inline]
pub(crate) fn set<S: Storage>(
    s: &mut S,
    key: &[u8],
    hash: KeyHash,
    value: &[u8],
    flags: u32,
    exptime: i64,
    prior: Prior<S::Found>,
) -> Result<u64, EngineError> {
    let expiry = expiry_from_exptime(exptime, s.now());
    let header = ItemHeader { key_len: key.len(), value_len: value.len(), flags, expiry, cas: None, state: 0 };
    check_size(s.max_item_bytes(), &header)?;
    s.write(hash, &header, key, NewValue::Parts([value, &[]]), prior)
}

/// set, add, replace, append, prepend and cas with memcached's semantics.
pub(crate) fn store<S: Storage>(s: &mut S, request: &StoreRequest<'_>) -> Result<StoreOutcome, EngineError> {
    let hash = KeyHash::of(request.key);
    if request.mode == StoreMode::Set {
        let cas = set(s, request.key, hash, request.value, request.flags, request.exptime, Prior::Unknown)?;
        return Ok(StoreOutcome::Stored { cas });
    }
    let found = s.lookup(request.key, hash);
    store_found(s, request, hash, found)
}

/// `store` once the key's live item (`found`) has been looked up.
fn store_found<S: Storage>(
    s: &mut S,
    request: &StoreRequest<'_>,
    hash: KeyHash,
    found: Option<S::Found>,
) -> Result<StoreOutcome, EngineError> {
    match (request.mode, found) {
        (StoreMode::Add, Some(_)) => Ok(StoreOutcome::NotStored),
        (StoreMode::Replace | StoreMode::Append | StoreMode::Prepend, None) => Ok(StoreOutcome::NotStored),
        (StoreMode::Cas, None) => Ok(StoreOutcome::NotFound),
        (StoreMode::Cas, Some(found)) if S::cas(&found) != request.cas => Ok(StoreOutcome::Exists),
        (StoreMode::Append | StoreMode::Prepend, Some(found)) if request.cas != 0 && S::cas(&found) != request.cas => {
            Ok(StoreOutcome::Exists)
        }
        (StoreMode::Append | StoreMode::Prepend, Some(found)) => {
            let old = S::header(&found);
            let header = ItemHeader { value_len: old.value_len + request.value.len(), cas: None, state: 0, ..*old };
            check_size(s.max_item_bytes(), &header)?;
            let old_first = request.mode == StoreMode::Append;
            let value = NewValue::Combined { old: found, data: request.value, old_first };
            let cas = s.write(hash, &header, request.key, value, Prior::Present(found))?;
            Ok(StoreOutcome::Stored { cas })
        }
        (_, found) => {
            let prior = Prior::from(found);
            let cas = set(s, request.key, hash, request.value, request.flags, request.exptime, prior)?;
            Ok(StoreOutcome::Stored { cas })
        }
    }
}

/// delete, optionally only if the item has CAS `cas` (0 = any).
pub(crate) fn delete<S: Storage>(s: &mut S, key: &[u8], cas: u64) -> DeleteOutcome {
    let hash = KeyHash::of(key);
    let Some(found) = s.lookup(key, hash) else {
        s.forget_absent(hash);
        return DeleteOutcome::NotFound;
    };
    if cas != 0 && cas != S::cas(&found) {
        return DeleteOutcome::Exists;
    }
    s.remove(&found);
    DeleteOutcome::Deleted
}

/// incr / decr with memcached's semantics.
pub(crate) fn arith<S: Storage>(s: &mut S, key: &[u8], request: &ArithRequest) -> Result<ArithOutcome, EngineError> {
    let hash = KeyHash::of(key);
    let Some(found) = s.lookup(key, hash) else {
        return match request.initial {
            None => Ok(ArithOutcome::NotFound),
            Some(initial) => {
                let counter = CounterValue::new(initial.value, 0);
                let digits = counter.digits();
                let cas = set(s, key, hash, digits, initial.flags, initial.exptime, Prior::Absent)?;
                Ok(ArithOutcome::Value { value: initial.value, cas, created: true })
            }
        };
    };
    let old = *S::header(&found);
    // memcached refuses an empty value as non-numeric before it compares the CAS.
    if old.value_len == 0 {
        return Err(EngineError::NonNumeric);
    }
    if request.cas != 0 && request.cas != S::cas(&found) {
        return Ok(ArithOutcome::Exists);
    }
    let current = parse_counter(s.value(&found)).ok_or(EngineError::NonNumeric)?;
    let value = apply_delta(current, request.delta, request.decrement);
    let counter = CounterValue::new(value, old.value_len);
    let header = ItemHeader { value_len: counter.value_len, cas: None, state: 0, ..old };
    check_size(s.max_item_bytes(), &header)?;
    let cas = s.write(hash, &header, key, NewValue::Counter(counter), Prior::Present(found))?;
    Ok(ArithOutcome::Value { value, cas, created: false })
}

/// touch and get-and-touch: a read that sets a new exptime.
pub(crate) fn touch<S: Storage>(s: &mut S, key: &[u8], exptime: i64) -> Result<Option<S::Found>, EngineError> {
    let Some(found) = s.read(key, KeyHash::of(key)) else { return Ok(None) };
    let expiry = expiry_from_exptime(exptime, s.now());
    s.set_expiry(found, expiry).map(Some)
}

/// mg: a get with memcached's meta semantics. `T` sets a new exptime; on a miss, `N` creates an
/// empty item and hands its creator the recache token; on a hit the token goes to the first
/// reader of a stale item, or with `R` to the first reader of an item that expires before the
/// `R` time. Every read marks the item fetched.
pub(crate) fn meta_get<'s, S: Storage>(
    s: &'s mut S,
    key: &[u8],
    request: &MetaGet,
) -> Result<Option<MetaItem<'s>>, EngineError> {
    let hash = KeyHash::of(key);
    let (found, created) = match s.read(key, hash) {
        Some(found) => (found, false),
        None => {
            let Some(exptime) = request.vivify else { return Ok(None) };
            set(s, key, hash, &[], 0, exptime, Prior::Absent)?;
            match s.lookup(key, hash) {
                Some(found) => (found, true),
                // An already-expired vivify exptime leaves nothing to return.
                None => return Ok(None),
            }
        }
    };
    let found = match request.touch {
        Some(exptime) => {
            let expiry = expiry_from_exptime(exptime, s.now());
            s.set_expiry(found, expiry)?
        }
        None => found,
    };
    let header = *S::header(&found);
    let recache_due = request
        .recache
        .is_some_and(|exptime| header.expiry != 0 && header.expiry < expiry_from_exptime(exptime, s.now()));
    let state = header.state;
    let won = state & item::TOKEN_SENT == 0 && (created || recache_due || state & item::STALE != 0);
    if won {
        s.set_state(&found, item::TOKEN_SENT);
    }
    let last_access = if request.last_access { s.now().saturating_sub(s.written_at(&found)) } else { 0 };
    Ok(Some(MetaItem { item: s.item(&found), won, last_access }))
}

/// md with `I`: instead of deleting, marks the item stale with a new CAS (and exptime, if
/// given) and takes back any recache token, so the next reader wins it.
pub(crate) fn invalidate<S: Storage>(
    s: &mut S,
    key: &[u8],
    cas: u64,
    exptime: Option<i64>,
) -> Result<DeleteOutcome, EngineError> {
    let Some(found) = s.lookup(key, KeyHash::of(key)) else { return Ok(DeleteOutcome::NotFound) };
    if cas != 0 && cas != S::cas(&found) {
        return Ok(DeleteOutcome::Exists);
    }
    let old = *S::header(&found);
    let expiry = exptime.map_or(old.expiry, |exptime| expiry_from_exptime(exptime, s.now()));
    let state = (old.state | item::STALE) & !item::TOKEN_SENT;
    s.rewrite(&found, &ItemHeader { expiry, state, cas: None, ..old })?;
    Ok(DeleteOutcome::Deleted)
}

/// ms with `I` and a CAS: like `store`, except that a CAS older than the item's stores the
/// value anyway, marked stale, keeping the item's expiry and any recache token already handed
/// out (memcached's invalidation by a late writer).
pub(crate) fn store_invalidating<S: Storage>(
    s: &mut S,
    request: &StoreRequest<'_>,
) -> Result<StoreOutcome, EngineError> {
    let hash = KeyHash::of(request.key);
    let found = s.lookup(request.key, hash);
    let Some(found) = found.filter(|found| request.mode == StoreMode::Cas && request.cas < S::cas(found)) else {
        return store_found(s, request, hash, found);
    };
    let old = S::header(&found);
    let header = ItemHeader {
        key_len: request.key.len(),
        value_len: request.value.len(),
        flags: request.flags,
        expiry: old.expiry,
        cas: None,
        state: item::STALE | (old.state & item::TOKEN_SENT),
    };
    check_size(s.max_item_bytes(), &header)?;
    let cas = s.write(hash, &header, request.key, NewValue::Parts([request.value, &[]]), Prior::Present(found))?;
    Ok(StoreOutcome::Stored { cas })
}

/// me: what memcached's meta debug reports, without counting as a read.
pub(crate) fn debug_item<S: Storage>(s: &mut S, key: &[u8]) -> Option<ItemDebug> {
    let found = s.lookup(key, KeyHash::of(key))?;
    let header = S::header(&found);
    let now = s.now();
    Some(ItemDebug {
        ttl: if header.expiry == 0 { -1 } else { i64::from(header.expiry) - i64::from(now) },
        last_access: now.saturating_sub(s.written_at(&found)),
        cas: S::cas(&found),
        fetched: header.state & item::FETCHED != 0,
        size: S::size(&found),
        value_len: header.value_len,
    })
}
