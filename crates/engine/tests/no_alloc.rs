//! The engine allocates nothing after a partition is created: a counting global allocator
//! watches this thread while a small partition is driven far past its budget.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use tierkv_engine::*;

struct CountingAllocator;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded unchanged to the system allocator; the counter is a
// const-initialised thread-local Cell, which never allocates.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|count| count.set(count.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|count| count.set(count.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

fn allocations() -> u64 {
    ALLOCATIONS.with(|count| count.get())
}

/// Writes `i` as a decimal key into `out` without allocating.
fn key(i: u64, out: &mut [u8; 24]) -> &[u8] {
    let counter = CounterValue::new(i, 0);
    out[..4].copy_from_slice(b"key:");
    out[4..4 + counter.value_len].copy_from_slice(counter.digits());
    &out[..4 + counter.value_len]
}

#[test]
fn no_allocation_after_creation() {
    let config = PartitionConfig {
        memory_bytes: 64 << 10,
        max_memory_bytes: None,
        index_buckets: Some(64),
        max_item_bytes: 1024,
        expected_item_bytes: 64,
    };
    let mut partition = Partition::new(&config).unwrap();
    let budget = partition.allocated_bytes();
    let before = allocations();
    let values = [0u8; 600];
    let (mut k1, mut k2) = ([0u8; 24], [0u8; 24]);
    let mut written = 0usize;
    let mut hits = 0u64;
    let mut i = 0u64;
    while written < 100 * budget {
        let value = &values[..(i % 600) as usize];
        partition.set(key(i % 5000, &mut k1), value, i as u32, 0).unwrap();
        written += value.len();
        hits += u64::from(partition.get(key(i % 4000, &mut k1)).unwrap().is_some());
        if i.is_multiple_of(7) {
            partition.delete(key(i % 3000, &mut k1), 0).unwrap();
        }
        if i.is_multiple_of(11) {
            let request = StoreRequest {
                mode: StoreMode::Append,
                key: key(i % 5000, &mut k1),
                value: b"tail",
                flags: 0,
                exptime: 0,
                cas: 0,
            };
            partition.store(&request).unwrap();
            partition.touch(key(i % 5000, &mut k2), 100).unwrap();
            partition.set(b"counter", b"41", 0, 0).unwrap();
            let incr = ArithRequest { delta: 1, decrement: false, cas: 0, initial: None };
            partition.arith(b"counter", &incr).unwrap();
        }
        if i.is_multiple_of(101) {
            let keys = [key(i % 5000, &mut k1), key((i + 1) % 5000, &mut k2), b"counter"];
            partition.get_batch(&keys, |_, result| hits += u64::from(matches!(result, Ok(Some(_)))));
            let sets = [SetRequest { key: b"batch", value: &values[..40], flags: 0, exptime: 0 }; 3];
            partition.set_batch(&sets, |_, result| assert!(result.is_ok()));
            partition.flush_all(if i.is_multiple_of(202) { 0 } else { 5 });
            partition.set_clock(partition.now() + 1);
        }
        i += 1;
    }
    let after = allocations();
    assert!(hits > 0, "the workload must actually hit");
    assert_eq!(after - before, 0, "the engine allocated after creation");
    assert_eq!(partition.allocated_bytes(), budget);
    // The counter does see allocations, so a zero above means something.
    let boxed = std::hint::black_box(Box::new(5u64));
    assert!(allocations() > after && *boxed == 5);
}
