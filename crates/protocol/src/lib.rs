//! tierkv-protocol: memcached's text, meta and binary protocols and the UDP frame header, as pure
//! functions over byte slices, for both sides of a connection (server: decode requests, encode
//! replies; client: the reverse).
//!
//! It must never do I/O, touch the engine, spawn threads, or allocate per request on the common
//! path. Nothing is implemented yet: the codecs arrive with issue 3.
