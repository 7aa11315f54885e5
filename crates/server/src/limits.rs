//! Limits that more than one module needs, in one place.

/// Replies a connection may have waiting before the server stops executing its requests (it
/// may exceed this by one reply of at most one item): about what a socket's send buffer holds.
/// Under memory pressure the worker uses a smaller mark (`worker::budget`).
pub const MAX_PENDING_OUTPUT_BYTES: usize = 256 << 10;
