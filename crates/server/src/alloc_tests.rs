//! The GET and SET paths allocate nothing per request: a counting global allocator (for this
//! test binary only) counts the allocations of the test's own thread while requests of every
//! protocol are decoded and executed into a reply buffer that already has its working size.

use crate::after::After;
use crate::config::Config;
use crate::execute::execute;
use crate::stats::{ServerState, State};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use tierkv_engine::{AnyPartition as Partition, Mode, PartitionConfig};
use tierkv_protocol::{decode_request, Decoded, Limits};

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded unchanged to the system allocator; the counters are
// const-initialised thread-locals without destructors, so touching them never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCATIONS.with(|n| n.set(n.get() + 1));
        }
        // SAFETY: the caller's layout is passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCATIONS.with(|n| n.set(n.get() + 1));
        }
        // SAFETY: as for alloc and dealloc.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Decodes and executes every request in `input`; returns the allocations made meanwhile.
fn allocations_while_serving(partition: &mut Partition, state: &mut State, input: &[u8], out: &mut Vec<u8>) -> u64 {
    let limits = Limits::default();
    ALLOCATIONS.with(|n| n.set(0));
    COUNTING.with(|c| c.set(true));
    let mut at = 0;
    let mut progress = crate::execute::Progress::whole();
    while at < input.len() {
        let Decoded::Request { request, consumed } = decode_request(&input[at..], &limits) else {
            COUNTING.with(|c| c.set(false));
            panic!("request at byte {at} did not decode");
        };
        assert_eq!(execute(partition, &request, out, state, &mut progress), After::Continue);
        at += consumed;
    }
    COUNTING.with(|c| c.set(false));
    ALLOCATIONS.with(Cell::get)
}

#[test]
fn get_and_set_paths_do_not_allocate() {
    for mode in [Mode::Cache, Mode::Store] {
        serving_does_not_allocate(mode);
    }
}

fn serving_does_not_allocate(mode: Mode) {
    let settings = crate::config::load(["tierkv", "-m", "64"]).and_then(Config::settings).unwrap();
    let mut partition = Partition::new(mode, &PartitionConfig::new(64 << 20)).unwrap();
    let mut state = State::new(std::sync::Arc::new(ServerState::new(&settings)), 0);
    let mut input = Vec::new();
    for i in 0..500 {
        let key = format!("key:{i:08}");
        input.extend_from_slice(
            format!("set {key} 5 0 32\r\n{}\r\nget {key}\r\ngets {key} nope\r\n", "v".repeat(32)).as_bytes(),
        );
        input
            .extend_from_slice(format!("ms {key} 4 T0 F1\r\nvvvv\r\nmg {key} v f t c k\r\nmg absent v\r\n").as_bytes());
        tierkv_protocol::binary::write_request(
            &mut input,
            0x01,
            i,
            0,
            &[0, 0, 0, 1, 0, 0, 0, 0],
            key.as_bytes(),
            b"bin",
        );
        tierkv_protocol::binary::write_request(&mut input, 0x0c, i, 0, &[], key.as_bytes(), b"");
        tierkv_protocol::binary::write_request(&mut input, 0x00, i, 0, &[], b"absent", b"");
    }
    let mut out = Vec::with_capacity(1 << 20);
    // A first pass warms everything up; the second must not allocate at all.
    allocations_while_serving(&mut partition, &mut state, &input, &mut out);
    out.clear();
    let allocations = allocations_while_serving(&mut partition, &mut state, &input, &mut out);
    assert_eq!(allocations, 0, "allocations while serving 4000 GET/SET requests in {mode:?} mode");
    assert!(out.len() > 50_000, "the requests were answered");
    // The counter is live: formatting a stats reply does allocate.
    COUNTING.with(|c| c.set(true));
    let text = format!("{}", out.len());
    COUNTING.with(|c| c.set(false));
    assert!(ALLOCATIONS.with(Cell::get) > 0, "{text}");
}
