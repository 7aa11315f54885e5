//! The whole flash file across layout changes: a fleet of partitions (one store per region, as
//! the server runs them) on one simulated device, driven through clean stops, crashes and
//! restarts with other thread counts, file sizes, segment sizes and index kinds. After every
//! reopen nothing but the last acknowledged value of a key (or a miss) may be served: a region
//! written under an earlier layout must never come back.

use std::collections::HashMap;

use proptest::prelude::*;

use super::io::sim::SimDisk;
use super::tests::{key, value};
use super::*;

const DISK: u64 = 12 << 20;

#[derive(Clone, Copy, Debug)]
struct Shape {
    partitions: u32,
    file_bytes: u64,
    segment_bytes: u32,
    cascade: bool,
    sets: bool,
}

fn config(shape: Shape, partition: u32) -> FlashConfig {
    let mut cfg = FlashConfig::new(shape.file_bytes, partition, shape.partitions);
    cfg.segment_bytes = shape.segment_bytes;
    cfg.max_reads = 16;
    if shape.cascade {
        cfg.expected_item_bytes = 4096;
        let mut c = CascadeConfig::with_t1_bytes(256);
        (c.reorg_at, c.pages_per_stream, c.block_entries) = (2, 4, 6);
        cfg.cascade = Some(c);
    }
    if shape.sets {
        cfg.expected_item_bytes = 2048;
        cfg.sets = Some(SetsConfig { log_percent: 40, max_moves: 4, ..SetsConfig::default() });
    }
    cfg
}

struct Fleet {
    disk: SimDisk,
    shape: Shape,
    stores: Vec<FlashStore>,
    /// The last acknowledged value per key (None: deleted or never stored, must miss).
    model: HashMap<u32, Option<Vec<u8>>>,
    now: Now,
    version: u64,
}

impl Fleet {
    fn new(shape: Shape, seed: u64) -> Fleet {
        let disk = SimDisk::new(DISK as usize, seed);
        let mut fleet = Fleet {
            disk,
            shape,
            stores: Vec::new(),
            model: HashMap::new(),
            now: Now { unix: 1_000_000, nanos: 1 },
            version: 0,
        };
        fleet.open(shape);
        fleet
    }

    fn open(&mut self, shape: Shape) -> Option<String> {
        self.shape = shape;
        let mut io: Box<dyn IoEngine> = Box::new(self.disk.device());
        let claim = claim_file(io.as_mut(), &config(shape, 0), false).expect("the file is ours");
        self.stores = (0..shape.partitions)
            .map(|p| {
                let mut cfg = config(shape, p);
                cfg.identity = claim.identity;
                FlashStore::open(Box::new(self.disk.device()), cfg, self.now).expect("open").0
            })
            .collect();
        claim.changed
    }

    fn store_of(&mut self, k: u32) -> &mut FlashStore {
        let p = KeyHash::of(&key(k)).partition(self.shape.partitions);
        &mut self.stores[p as usize]
    }

    /// Makes a change of `k` durable first, as the server does: an invalidation mark for a key
    /// that may have a flash copy, on the device before the change runs. False if the mark's
    /// write failed (the change must not happen).
    fn invalidate_first(&mut self, k: u32) -> bool {
        let hash = KeyHash::of(&key(k));
        let now = self.now;
        let store = self.store_of(k);
        if !store.needs_durable(hash) {
            return true;
        }
        let Ok(ticket) = store.invalidate(hash, now) else { return false };
        for _ in 0..1000 {
            store.commit();
            let mut commits = Vec::new();
            store.take_commits(&mut commits);
            if let Some(&(_, written)) = commits.iter().find(|&&(t, _)| t == ticket) {
                if written {
                    store.remove_invalidated(hash);
                }
                return written;
            }
            store.wait(now, &mut Vec::new());
        }
        panic!("an invalidation never reached the device");
    }

    fn insert(&mut self, k: u32) {
        if !self.invalidate_first(k) {
            return;
        }
        self.version += 1;
        let (key, value) = (key(k), value(k, self.version, 100 + (k as usize * 13) % 900));
        let meta = ItemMeta { flags: k, expiry: 0, cas: self.version, state: 0 };
        let now = self.now;
        let mut outcome = InsertOutcome::Busy;
        for _ in 0..4 {
            outcome = self.store_of(k).insert(KeyHash::of(&key), &key, &value, meta, now);
            if outcome != InsertOutcome::Busy {
                break;
            }
            self.store_of(k).wait(now, &mut Vec::new());
        }
        self.model.insert(k, (outcome == InsertOutcome::Stored).then_some(value));
    }

    fn delete(&mut self, k: u32) {
        if !self.invalidate_first(k) {
            return;
        }
        self.store_of(k).delete(KeyHash::of(&key(k)));
        self.model.insert(k, None);
    }

    /// Looks every key up; each hit must be its last acknowledged value. Returns the hits.
    fn check(&mut self, keys: u32) -> usize {
        let now = self.now;
        let mut hits = 0;
        for k in 0..keys {
            let key = key(k);
            let store = self.store_of(k);
            let item = match store.lookup(KeyHash::of(&key), &key, u64::from(k), now) {
                Lookup::Hit(item) => Some(item),
                Lookup::Pending => loop {
                    let mut done = Vec::new();
                    store.wait(now, &mut done);
                    if let Some(d) = done.into_iter().find(|d| d.token == u64::from(k)) {
                        break d.item;
                    }
                },
                Lookup::Miss | Lookup::Busy => None,
            };
            if let Some(item) = item {
                let want = self.model.get(&k).cloned().flatten();
                assert!(
                    want.as_deref() == Some(&item.value[..]),
                    "key {k}: served {:?}, the last acknowledged is {:?}",
                    String::from_utf8_lossy(&item.value[..10]),
                    want.map(|v| String::from_utf8_lossy(&v[..10]).into_owned())
                );
                hits += 1;
            }
        }
        hits
    }

    fn close(&mut self) {
        for store in self.stores.drain(..) {
            store.close(self.now).expect("a clean close");
        }
    }

    fn crash(&mut self) {
        self.stores.clear();
        self.disk.crash();
        self.disk.revive();
    }
}

fn shape() -> impl Strategy<Value = Shape> {
    (1u32..=3, prop_oneof![Just(6u64 << 20), Just(12u64 << 20), Just(9u64 << 20)], any::<bool>(), 0u8..3).prop_map(
        |(partitions, file_bytes, big, index)| Shape {
            partitions,
            file_bytes,
            segment_bytes: if big { 128 << 10 } else { 64 << 10 },
            cascade: index == 1,
            sets: index == 2,
        },
    )
}

#[derive(Clone, Debug)]
enum Op {
    Insert(u32),
    Delete(u32),
    /// Clean stop, then a start with this shape.
    Restart(Shape),
    /// kill -9, then a start with this shape.
    Crash(Shape),
}

const KEYS: u32 = 300;

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        20 => (0..KEYS).prop_map(Op::Insert),
        6 => (0..KEYS).prop_map(Op::Delete),
        2 => shape().prop_map(Op::Restart),
        1 => shape().prop_map(Op::Crash),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: super::tests::cases(48), ..ProptestConfig::default() })]

    #[test]
    fn no_layout_change_ever_serves_an_old_value(
        first in shape(),
        ops in prop::collection::vec(op(), 1..200),
        seed in any::<u64>(),
    ) {
        let mut fleet = Fleet::new(first, seed);
        for op in &ops {
            match *op {
                Op::Insert(k) => fleet.insert(k),
                Op::Delete(k) => fleet.delete(k),
                Op::Restart(shape) => {
                    fleet.close();
                    fleet.open(shape);
                    fleet.check(KEYS);
                }
                Op::Crash(shape) => {
                    fleet.crash();
                    fleet.open(shape);
                    fleet.check(KEYS);
                }
            }
        }
        fleet.check(KEYS);
    }
}

/// The operator's round trip from the issue: -t 2 writes v1, -t 1 overwrites or deletes every
/// key, -t 2 again must serve none of v1; the same with 256m -> 512m -> 256m.
#[test]
fn a_round_trip_through_another_layout_serves_no_old_value() {
    let two = Shape { partitions: 2, file_bytes: 12 << 20, segment_bytes: 64 << 10, cascade: false, sets: false };
    let one = Shape { partitions: 1, ..two };
    let small = Shape { file_bytes: 6 << 20, ..two };
    for (a, b) in [
        (two, one),
        (two, small),
        (Shape { cascade: true, ..two }, Shape { cascade: true, ..one }),
        (Shape { sets: true, ..two }, Shape { sets: true, ..one }),
        (two, Shape { sets: true, ..two }),
        (Shape { sets: true, ..two }, Shape { cascade: true, ..two }),
    ] {
        let mut fleet = Fleet::new(a, 7);
        for k in 0..KEYS {
            fleet.insert(k);
        }
        fleet.close();
        fleet.open(a);
        assert!(fleet.check(KEYS) > 0, "a clean restart in the same layout keeps items");
        fleet.close();
        let changed = fleet.open(b);
        assert!(changed.is_some_and(|why| why.contains("layout changed")));
        for k in 0..KEYS {
            if k % 2 == 0 {
                fleet.insert(k);
            } else {
                fleet.delete(k);
            }
        }
        fleet.close();
        fleet.open(a);
        assert_eq!(fleet.check(KEYS), 0, "after {a:?} -> {b:?} -> {a:?} every region starts empty");
    }
}

#[test]
fn a_foreign_file_is_refused_unless_forced_and_an_old_format_is_taken_over() {
    let shape = Shape { partitions: 1, file_bytes: 3 << 20, segment_bytes: 64 << 10, cascade: false, sets: false };
    let disk = SimDisk::new(DISK as usize, 1);
    let mut page = AlignedBuf::new(layout::PAGE);
    page[..22].copy_from_slice(b"#!/bin/sh\necho hello\n\n");
    let mut io: Box<dyn IoEngine> = Box::new(disk.device());
    io.submit(io::IoOp { kind: io::IoKind::Write, offset: 0, buf: page, len: layout::PAGE, at: 0, token: 0 });
    io.flush();
    io.wait(&mut Vec::new());
    assert_eq!(claim_file(io.as_mut(), &config(shape, 0), false), Err(ClaimError::Foreign));
    let forced = claim_file(io.as_mut(), &config(shape, 0), true).expect("forced");
    assert!(forced.changed.is_some_and(|why| why.contains("--flash-force")));
    let again = claim_file(io.as_mut(), &config(shape, 0), false).expect("ours now");
    assert_eq!((again.identity, again.changed), (forced.identity, None));
}

#[test]
fn a_change_of_the_item_size_or_log_share_is_named_when_the_tier_starts_empty() {
    let shape = Shape { partitions: 1, file_bytes: 3 << 20, segment_bytes: 64 << 10, cascade: false, sets: true };
    let disk = SimDisk::new(DISK as usize, 1);
    let mut io: Box<dyn IoEngine> = Box::new(disk.device());
    let first = config(shape, 0);
    let claim = claim_file(io.as_mut(), &first, false).expect("a blank file");
    assert!(claim.new_file && claim.changed.is_none());
    let mut bigger = first.clone();
    bigger.expected_item_bytes = first.expected_item_bytes + 28;
    let changed = claim_file(io.as_mut(), &bigger, false).expect("ours").changed.expect("a new layout");
    let (was, now) = (first.expected_item_bytes, bigger.expected_item_bytes);
    assert!(
        changed.contains(&format!("sized for {was}-byte items on flash"))
            && changed.contains(&format!(
                "now 1 partitions, 3145728 bytes, 65536-byte segments, the sets index, sized for {now}-byte"
            )),
        "{changed}"
    );
    let mut other = bigger.clone();
    other.sets.as_mut().expect("sets").log_percent += 5;
    let changed = claim_file(io.as_mut(), &other, false).expect("ours").changed.expect("a new layout");
    assert!(changed.contains("its log"), "{changed}");
    // A setting the line does not name still changes the layout, and says so.
    let mut hidden = other.clone();
    hidden.sets.as_mut().expect("sets").max_moves += 1;
    let changed = claim_file(io.as_mut(), &hidden, false).expect("ours").changed.expect("a new layout");
    assert!(changed.contains("other settings of the index differ"), "{changed}");
    // The same layout again keeps the file's identity.
    let again = claim_file(io.as_mut(), &hidden, false).expect("ours");
    assert!(again.changed.is_none());
    // A header an earlier run wrote (no settings recorded) keeps its identity and gains them.
    let read_first = |io: &mut dyn IoEngine| {
        io.submit(io::IoOp {
            kind: io::IoKind::Read,
            offset: 0,
            buf: AlignedBuf::new(layout::PAGE),
            len: layout::PAGE,
            at: 0,
            token: 0,
        });
        io.flush();
        let mut done = Vec::new();
        io.wait(&mut done);
        done.pop().expect("the read").buf
    };
    let mut page = read_first(io.as_mut());
    page[56..72].fill(0);
    io.submit(io::IoOp { kind: io::IoKind::Write, offset: 0, buf: page, len: layout::PAGE, at: 0, token: 0 });
    io.flush();
    io.wait(&mut Vec::new());
    let old = claim_file(io.as_mut(), &hidden, false).expect("ours");
    assert_eq!((old.identity, old.changed), (again.identity, None));
    match layout::FileHeader::classify(&read_first(io.as_mut())[..layout::PAGE]) {
        layout::FirstPage::Ours(h) => assert_eq!(h.item_bytes, hidden.expected_item_bytes),
        other => panic!("{other:?}"),
    }
}
