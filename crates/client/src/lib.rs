//! tierkv-client: a Rust client that sends each key straight to the core that owns it (MICA's
//! client-assisted request direction), batches requests, and spreads keys over servers by
//! consistent hashing.
//!
//! It must never depend on the engine's internals beyond the published key-hash function, and it
//! must never block the caller on one slow server. Nothing is implemented yet.
