//! The typed calls both clients offer (`get`, `set`, `get_many`, atomics, ...) and the
//! pipeline builder. Each typed call is a batch of requests run by the client's `run`; the
//! reply conversion lives here once, and `typed_methods!` writes the calls for the blocking
//! and the async client alike.

use crate::codec::{Atomic, Item, Op, Reply, StoreMode, VectorElem, VectorOpCode};
use crate::error::Error;

/// A mixed batch of requests, run in one go by `Client::execute`: each place's requests are
/// pipelined, and the results come back in the order the requests were added.
#[derive(Clone, Debug, Default)]
pub struct Pipeline<'a> {
    pub(crate) ops: Vec<Op<'a>>,
}

impl<'a> Pipeline<'a> {
    /// An empty pipeline.
    pub fn new() -> Pipeline<'a> {
        Pipeline::default()
    }

    /// Adds any request.
    pub fn op(&mut self, op: Op<'a>) -> &mut Self {
        self.ops.push(op);
        self
    }

    /// Adds a `get`.
    pub fn get(&mut self, key: &'a [u8]) -> &mut Self {
        self.op(Op::Get(key))
    }

    /// Adds a `gets`.
    pub fn gets(&mut self, key: &'a [u8]) -> &mut Self {
        self.op(Op::Gets(key))
    }

    /// Adds a `set` with no flags and no expiry.
    pub fn set(&mut self, key: &'a [u8], value: &'a [u8]) -> &mut Self {
        self.op(Op::Store { mode: StoreMode::Set, key, value, flags: 0, exptime: 0 })
    }

    /// Adds a storage command.
    pub fn store(&mut self, mode: StoreMode, key: &'a [u8], value: &'a [u8], flags: u32, exptime: u32) -> &mut Self {
        self.op(Op::Store { mode, key, value, flags, exptime })
    }

    /// Adds a `delete`.
    pub fn delete(&mut self, key: &'a [u8]) -> &mut Self {
        self.op(Op::Delete(key))
    }

    /// Adds an `incr`.
    pub fn incr(&mut self, key: &'a [u8], delta: u64) -> &mut Self {
        self.op(Op::Incr(key, delta))
    }

    /// Adds an atomic.
    pub fn atomic(&mut self, atomic: Atomic<'a>) -> &mut Self {
        self.op(Op::Atomic(atomic))
    }

    /// Requests so far.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// No requests yet.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// The server's answer to one atomic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AtomicReply {
    /// The operation ran.
    Done {
        /// The value before.
        old: u64,
        /// The value after.
        new: u64,
    },
    /// `cas` found this value.
    Mismatch {
        /// The value it holds.
        current: u64,
    },
    /// No such key.
    NotFound,
    /// CLIENT_ERROR or SERVER_ERROR, with the server's words.
    Error(String),
}

fn unexpected(reply: Reply) -> Error {
    match reply {
        Reply::ServerError(line) => Error::Server(line),
        other => Error::Unexpected(format!("{other:?}")),
    }
}

pub(crate) fn item(reply: Result<Reply, Error>) -> Result<Option<Item>, Error> {
    match reply? {
        Reply::Hit(item) => Ok(Some(item)),
        Reply::Miss => Ok(None),
        other => Err(unexpected(other)),
    }
}

pub(crate) fn value(reply: Result<Reply, Error>) -> Result<Option<Vec<u8>>, Error> {
    Ok(item(reply)?.map(|item| item.value))
}

/// `STORED`, `DELETED`, `TOUCHED`, `OK` are true; `NOT_STORED`, `NOT_FOUND`, `EXISTS` false.
pub(crate) fn done(reply: Result<Reply, Error>) -> Result<bool, Error> {
    match reply? {
        Reply::Stored | Reply::Deleted | Reply::Touched | Reply::Ok => Ok(true),
        Reply::NotStored | Reply::NotFound | Reply::Exists => Ok(false),
        other => Err(unexpected(other)),
    }
}

pub(crate) fn counter(reply: Result<Reply, Error>) -> Result<Option<u64>, Error> {
    match reply? {
        Reply::Number(n) => Ok(Some(n)),
        Reply::NotFound => Ok(None),
        other => Err(unexpected(other)),
    }
}

pub(crate) fn atomic(reply: Result<Reply, Error>) -> Result<AtomicReply, Error> {
    match reply? {
        Reply::AtomicDone { old, new } => Ok(AtomicReply::Done { old, new }),
        Reply::AtomicMismatch { current } => Ok(AtomicReply::Mismatch { current }),
        Reply::NotFound => Ok(AtomicReply::NotFound),
        Reply::ServerError(line) => Ok(AtomicReply::Error(line)),
        other => Err(unexpected(other)),
    }
}

pub(crate) fn vector_update(reply: Result<Reply, Error>) -> Result<Result<bool, String>, Error> {
    match reply? {
        Reply::Ok => Ok(Ok(true)),
        Reply::NotFound => Ok(Ok(false)),
        Reply::ServerError(line) => Ok(Err(line)),
        other => Err(unexpected(other)),
    }
}

pub(crate) fn set_op<'a>(key: &'a [u8], value: &'a [u8], exptime: u32) -> Op<'a> {
    Op::Store { mode: StoreMode::Set, key, value, flags: 0, exptime }
}

pub(crate) fn vector_ops<'a>(key: &'a [u8], updates: &[(VectorOpCode, VectorElem, u32, &'a [u8])]) -> Vec<Op<'a>> {
    updates.iter().map(|&(op, elem, offset, data)| Op::VectorUpdate { key, op, elem, offset, data }).collect()
}

/// Writes the typed calls on a client type with a `run(&self, &[Op]) -> Vec<Result<Reply>>`
/// (an `async fn` when called as `typed_methods!(Client, async, await)`).
macro_rules! typed_methods {
    ($client:ty, $($a:ident, $aw:ident)?) => {
        use crate::api::{self as conv, AtomicReply};
        use crate::codec::{Atomic, Item, StoreMode, VectorElem, VectorOpCode};

        impl $client {
            crate::api::async_or_not!($($a)?; fn one(&self, op: Op<'_>) -> Result<Reply, Error> {
                self.run(&[op])$(.$aw)?.pop().unwrap_or(Err(Error::Unexpected("no reply".into())))
            });

            crate::api::async_or_not!($($a)?; #[doc = "`get`: the value, or None."]
            pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
                conv::value(self.one(Op::Get(key))$(.$aw)?)
            });

            crate::api::async_or_not!($($a)?; #[doc = "`get`: the value and its flags, or None."]
            pub fn get_item(&self, key: &[u8]) -> Result<Option<Item>, Error> {
                conv::item(self.one(Op::Get(key))$(.$aw)?)
            });

            crate::api::async_or_not!($($a)?; #[doc = "`gets`: the value, flags and CAS unique, or None."]
            pub fn gets(&self, key: &[u8]) -> Result<Option<Item>, Error> {
                conv::item(self.one(Op::Gets(key))$(.$aw)?)
            });

            crate::api::async_or_not!($($a)?; #[doc = "`set` with no flags and no expiry; true when stored."]
            pub fn set(&self, key: &[u8], value: &[u8]) -> Result<bool, Error> {
                conv::done(self.one(conv::set_op(key, value, 0))$(.$aw)?)
            });

            crate::api::async_or_not!($($a)?; #[doc = "Any storage command: true when stored; false for \
                `NOT_STORED`, `EXISTS` (a lost cas) or `NOT_FOUND` (cas on a missing key)."]
            pub fn store(&self, mode: StoreMode, key: &[u8], value: &[u8], flags: u32, exptime: u32) -> Result<bool, Error> {
                conv::done(self.one(Op::Store { mode, key, value, flags, exptime })$(.$aw)?)
            });

            crate::api::async_or_not!($($a)?; #[doc = "`delete`: true when it was there."]
            pub fn delete(&self, key: &[u8]) -> Result<bool, Error> {
                conv::done(self.one(Op::Delete(key))$(.$aw)?)
            });

            crate::api::async_or_not!($($a)?; #[doc = "`incr`: the new value, or None for a missing key."]
            pub fn incr(&self, key: &[u8], delta: u64) -> Result<Option<u64>, Error> {
                conv::counter(self.one(Op::Incr(key, delta))$(.$aw)?)
            });

            crate::api::async_or_not!($($a)?; #[doc = "`decr`: the new value, or None for a missing key."]
            pub fn decr(&self, key: &[u8], delta: u64) -> Result<Option<u64>, Error> {
                conv::counter(self.one(Op::Decr(key, delta))$(.$aw)?)
            });

            crate::api::async_or_not!($($a)?; #[doc = "`touch`: true when the key was there."]
            pub fn touch(&self, key: &[u8], exptime: u32) -> Result<bool, Error> {
                conv::done(self.one(Op::Touch(key, exptime))$(.$aw)?)
            });

            crate::api::async_or_not!($($a)?; #[doc = "Many `get`s at once, split by server and partition, \
                sent pipelined; the values in the keys' order. Any failure fails the call (use \
                `run` for a result per key)."]
            pub fn get_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>, Error> {
                let ops: Vec<Op<'_>> = keys.iter().map(|&k| Op::Get(k)).collect();
                self.run(&ops)$(.$aw)?.into_iter().map(conv::value).collect()
            });

            crate::api::async_or_not!($($a)?; #[doc = "Many `set`s at once (no flags, this exptime); true \
                for each one stored."]
            pub fn set_many(&self, items: &[(&[u8], &[u8])], exptime: u32) -> Result<Vec<bool>, Error> {
                let ops: Vec<Op<'_>> = items.iter().map(|&(k, v)| conv::set_op(k, v, exptime)).collect();
                self.run(&ops)$(.$aw)?.into_iter().map(conv::done).collect()
            });

            crate::api::async_or_not!($($a)?; #[doc = "Many `delete`s at once; true for each key that was there."]
            pub fn delete_many(&self, keys: &[&[u8]]) -> Result<Vec<bool>, Error> {
                let ops: Vec<Op<'_>> = keys.iter().map(|&k| Op::Delete(k)).collect();
                self.run(&ops)$(.$aw)?.into_iter().map(conv::done).collect()
            });

            crate::api::async_or_not!($($a)?; #[doc = "One tierkv atomic."]
            pub fn atomic(&self, request: &Atomic<'_>) -> Result<AtomicReply, Error> {
                conv::atomic(self.one(Op::Atomic(*request))$(.$aw)?)
            });

            crate::api::async_or_not!($($a)?; #[doc = "Atomics pipelined: a hot key's updates reach its \
                server together and are combined there."]
            pub fn atomics(&self, requests: &[Atomic<'_>]) -> Result<Vec<AtomicReply>, Error> {
                let ops: Vec<Op<'_>> = requests.iter().map(|&a| Op::Atomic(a)).collect();
                self.run(&ops)$(.$aw)?.into_iter().map(conv::atomic).collect()
            });

            crate::api::async_or_not!($($a)?; #[doc = "`vnew`: a vector of `len` zeroes; true when stored."]
            pub fn vector_new(&self, key: &[u8], elem: VectorElem, len: u32) -> Result<bool, Error> {
                conv::done(self.one(Op::VectorNew { key, elem, len })$(.$aw)?)
            });

            crate::api::async_or_not!($($a)?; #[doc = "`vupd`s pipelined on `key`: Ok(true) applied, \
                Ok(false) no such key, Err(line) refused."]
            pub fn vector_updates(
                &self,
                key: &[u8],
                updates: &[(VectorOpCode, VectorElem, u32, &[u8])],
            ) -> Result<Vec<Result<bool, String>>, Error> {
                let ops = conv::vector_ops(key, updates);
                self.run(&ops)$(.$aw)?.into_iter().map(conv::vector_update).collect()
            });

            crate::api::async_or_not!($($a)?; #[doc = "`vget`: elements `offset..offset + count` as \
                little-endian bytes, or None for a miss."]
            pub fn vector_get(&self, key: &[u8], offset: u32, count: u32) -> Result<Option<Vec<u8>>, Error> {
                conv::value(self.one(Op::VectorGet { key, offset, count })$(.$aw)?)
            });
        }
    };
}

/// An item, `async` or not.
macro_rules! async_or_not {
    (async; $(#[$m:meta])* $v:vis fn $($rest:tt)*) => { $(#[$m])* $v async fn $($rest)* };
    (; $(#[$m:meta])* $v:vis fn $($rest:tt)*) => { $(#[$m])* $v fn $($rest)* };
}

pub(crate) use async_or_not;
pub(crate) use typed_methods;
