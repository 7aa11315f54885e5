//! What a connection does after one request's reply: go on, close, pause a multi-get, or
//! turn into a stream (a dump of the items, a watcher).
//!
//! Plain data shared by the request executors and the worker.

/// What the connection does after a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum After {
    Continue,
    Close,
    /// The request is only partly answered (a multi-get filled the output); execute it again
    /// later with the same `Progress`.
    Pause,
    /// The connection now streams a dump of the items (it takes no other request until the
    /// dump's END).
    Dump(crate::dump::DumpKind),
    /// The connection now streams these log streams (`watch::FETCHERS`, ...) and takes no
    /// other request.
    Watch(u8),
}
