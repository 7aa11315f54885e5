//! Every limit of the server in one place (sizes, counts, batches), with the relations
//! between them checked when compiling. Each bounds a buffer, a queue or a batch.

/// Replies a connection may have waiting before the server stops executing its requests (it
/// may exceed this by one reply of at most one item): about what a socket's send buffer holds.
/// Under memory pressure the worker uses a smaller mark (`worker::budget`).
pub(crate) const MAX_PENDING_OUTPUT_BYTES: usize = 256 << 10;

// ----- Connections and the worker loop -----

/// The replies to a UDP datagram may total this many times its size on the wire (frame
/// headers included) unless `--udp-amplification` says otherwise: a forged source address
/// gets at most this much.
pub(crate) const DEFAULT_UDP_AMPLIFICATION: usize = 10;
/// The largest `--udp-amplification`.
pub(crate) const MAX_UDP_AMPLIFICATION: usize = 100_000;

/// Failed authentication attempts before a connection is closed (`--auth-max-failures`).
pub(crate) const DEFAULT_AUTH_MAX_FAILURES: u32 = 3;

/// The largest UDP reply whatever the amplification allows.
pub(crate) const MAX_UDP_REPLY_BYTES: usize = 4 << 20;

/// Bytes read per read call.
pub(crate) const READ_CHUNK_BYTES: usize = 64 << 10;

/// Replies a connection may have waiting behind one not yet back from another worker.
pub(crate) const MAX_PARTS: usize = 256;

/// Forwarded reads (gets, whose replies carry an item) a connection may have outstanding:
/// bounds the replies that can arrive for it at once, beyond `MAX_PENDING_OUTPUT_BYTES`. Other
/// forwarded requests (small replies) are bounded by `MAX_PARTS`.
pub(crate) const MAX_REMOTE_READS_PER_CONNECTION: usize = 16;

/// The same for one UDP datagram, whose replies must fit its amplification bound: one item in
/// flight (forwarded, or parked on a flash read) before the bound is checked; a datagram that
/// would need more has the rest dropped, as a full receive buffer would drop it.
pub(crate) const MAX_UDP_REMOTE_READS: usize = 1;

/// Requests decoded and prefetched together in one step of a turn.
pub(crate) const BATCH: usize = 32;

/// Yields of an idle worker before it blocks in its poll (`--idle-yields`), by default and at
/// most. Measured at `-t 2`, pipeline 1, 50 connections, the load generator on the same two
/// CPUs: blocking at once, 0.30 blocking waits per request and 14.0-14.4 us of CPU per
/// request; two yields, 0.02 waits and 10.2-10.5 us (docs/benchmarks.md). With one worker
/// the default is 0: under callgrind, a get at pipeline 1 cost 3,282 instructions with the
/// yields and 3,106 without, and the clients have the other CPUs.
pub(crate) const DEFAULT_IDLE_YIELDS: usize = 2;
pub(crate) const MAX_IDLE_YIELDS: usize = 64;

/// An idle worker looks for flash completions before it sleeps (`--flash-poll-us`) only while
/// at most this many reads are in flight. Measured on a 2-vCPU virtual machine, one worker, 8
/// connections each keeping 4 GETs in flight (about 20 reads in flight): looking before every
/// sleep cost 35% more server CPU per GET and 20% fewer GETs/s (docs/benchmarks.md,
/// "Pipeline 1"); at pipeline 1 it takes a fifth off the latency.
pub(crate) const FLASH_POLL_MOST_READS: usize = 4;

/// Connections served again (left-over work, no event) per loop iteration, at most.
pub(crate) const AGAIN_PER_LOOP: usize = 64;

/// Reply buffers kept for reuse per worker (each at most `POOL_BUFFER_BYTES`).
pub(crate) const POOL_BUFFERS: usize = 256;

/// The largest reply buffer kept in the pool.
pub(crate) const POOL_BUFFER_BYTES: usize = 4 << 10;

/// Buffers above this size are given back once empty, so idle connections stay small.
pub(crate) const KEEP_BUFFER_BYTES: usize = 256 << 10;

// ----- Long get lines -----

/// A `get`/`gets` line longer than this is answered in pieces of about this size as it
/// arrives (`text::long_get`), so a line of any length costs a bounded buffer.
pub(crate) const LONG_GET_CHUNK_BYTES: usize = 16 << 10;

/// An unterminated get line of this much input from which no key can be taken (it is nearly
/// all spaces) is refused: nothing else could bound its buffer.
pub(crate) const MAX_UNTAKEN_GET_BYTES: usize = 256 << 10;

// ----- Under memory pressure (`worker/budget.rs`) -----

/// Input a connection may hold while the worker is under pressure.
pub(crate) const PRESSED_INPUT_BYTES: usize = 4 << 10;

/// Replies a connection may have waiting while the worker is under pressure.
pub(crate) const PRESSED_OUTPUT_BYTES: usize = 4 << 10;

/// Empty buffers larger than this are given back while under pressure (256 KiB otherwise).
pub(crate) const PRESSED_KEEP_BYTES: usize = 16 << 10;

/// Freed connection buffers past which the allocator is asked to give memory back.
pub(crate) const TRIM_AFTER_BYTES: usize = 4 << 20;

// ----- Between workers (`forward.rs`) -----

/// Request batches a worker may have out to one other worker at a time.
pub(crate) const MAX_BATCHES_IN_FLIGHT: usize = 8;

/// A batch is sent as soon as its requests reach this many bytes...
pub(crate) const BATCH_BYTES: usize = 64 << 10;

/// ... or this many entries (otherwise at the end of the loop turn).
pub(crate) const BATCH_ENTRIES: usize = 256;

/// Batches kept for reuse.
pub(crate) const POOL_BATCHES: usize = 64;

/// A batch's buffers above this capacity are not kept for reuse: one that carried a large
/// value is freed, not kept idle beside the connection budget (64 pooled batches of 1 MiB
/// would be 128 MiB a worker).
pub(crate) const KEEP_BATCH_BYTES: usize = 2 * BATCH_BYTES;

// ----- UDP (`udp.rs`, `worker/udp_session.rs`) -----

/// Datagrams taken per `recvmmsg`.
pub(crate) const RECV_BATCH: usize = 32;

/// Datagrams sent per `sendmmsg`.
pub(crate) const SEND_BATCH: usize = 64;

/// The largest datagram read whole (memcached reads 64 KiB too); longer ones are dropped.
pub(crate) const MAX_REQUEST_DATAGRAM: usize = 65_536;

/// Reply bytes waiting to be sent at most; replies beyond it are dropped, as a full socket
/// buffer drops them.
pub(crate) const MAX_QUEUED_BYTES: usize = 8 << 20;

// ----- Dumps (`dump.rs`) -----

/// Index buckets one step walks (a cache-mode bucket holds at most 8 items).
pub(crate) const DUMP_STEP_BUCKETS: usize = 256;

/// A dump takes its next step only while less than this waits to be written.
pub(crate) const DUMP_OUTPUT_BYTES: usize = 256 << 10;

/// memcached's cap on one `stats cachedump` reply.
pub(crate) const CACHEDUMP_MAX_BYTES: usize = 2 << 20;

// ----- Administration -----

/// Most prefixes counted; keys with a new prefix beyond this are not counted (memcached has
/// no bound; this keeps a client that sends random prefixes from growing the table forever).
pub(crate) const MAX_PREFIXES: usize = 10_000;

/// memcached's limit on watchers.
pub(crate) const MAX_WATCHERS: usize = 20;

/// memcached's per-watcher buffer.
pub(crate) const WATCHER_BUFFER_BYTES: usize = 256 << 10;

// ----- Start-up -----

/// The most workers (and partitions) a server runs.
pub(crate) const MAX_THREADS: usize = 256;

// How the limits relate: a batch's keys are prefetched in one engine chunk (the engine ignores
// hashes past its chunk); the pressed marks are below the normal ones; a pooled reply buffer
// is small next to the output mark; a whole output mark fits a UDP reply; a long get line's
// piece fits what a connection may leave untaken.
const _: () = assert!(BATCH <= tierkv_engine::BATCH_CHUNK);
const _: () = assert!(PRESSED_OUTPUT_BYTES < MAX_PENDING_OUTPUT_BYTES && PRESSED_KEEP_BYTES < KEEP_BUFFER_BYTES);
const _: () = assert!(PRESSED_INPUT_BYTES < READ_CHUNK_BYTES && POOL_BUFFER_BYTES <= MAX_PENDING_OUTPUT_BYTES);
const _: () = assert!(MAX_PENDING_OUTPUT_BYTES <= MAX_UDP_REPLY_BYTES);
const _: () = assert!(LONG_GET_CHUNK_BYTES <= MAX_UNTAKEN_GET_BYTES);
