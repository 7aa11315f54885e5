//! tierkv-client: a client for fleets of memcached-compatible servers. It places keys with
//! libmemcached's weighted ketama (so it agrees with PHP, pylibmc and twemproxy pools on which
//! server owns a key), ejects failing servers as libmemcached does, pipelines every batch, and
//! with a tierkv server sends each key straight to the core that owns it (MICA's
//! client-assisted request direction, through `--direct-ports`).
//!
//! It must never depend on the engine's internals beyond the published key-hash function, and
//! it must never block one call on a server that call does not use. Blocking (`blocking`) and,
//! with the `tokio` feature, async (`tokio`) clients share the planning, encoding and decoding
//! in `plan`, `codec` and `reader`.

#![warn(missing_docs)]

mod api;
mod binary;
pub mod blocking;
pub mod codec;
mod conn;
mod error;
mod fleet;
pub mod ketama;
mod plan;
mod reader;
mod shared;
#[cfg(feature = "tokio")]
pub mod tokio;
mod topology;

pub use api::{AtomicReply, Pipeline};
pub use codec::{Atomic, AtomicCode, Item, Op, Reply, StoreMode, VectorElem, VectorOpCode};
pub use error::Error;
pub use fleet::{Auth, Config, Tls};
pub use ketama::ServerSpec;
pub use topology::{partition_of, Topology, TopologyError, PARTITION_HASH};
