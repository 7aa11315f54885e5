//! The flash store on a real file: the same workload through io_uring and through the thread
//! pool gives the same answers, before and after a clean restart.

use std::collections::BTreeMap;
use std::path::Path;

use tierkv_engine::flash::io::{Completion, IoKind, IoOp};
use tierkv_engine::flash::{
    engine_for, open_file, AlignedBuf, FlashConfig, FlashIo, FlashStore, InsertOutcome, ItemMeta, Lookup, Now, ReadDone,
};
use tierkv_engine::KeyHash;

const FILE_BYTES: u64 = 48 << 20;

fn config() -> FlashConfig {
    let mut cfg = FlashConfig::new(FILE_BYTES, 0, 1);
    cfg.segment_bytes = 256 << 10;
    cfg
}

fn open(path: &Path, io: FlashIo) -> (FlashStore, bool) {
    let (file, _direct) = open_file(path, FILE_BYTES).expect("the flash file opens");
    let (engine, note) = engine_for(io, &file, 32).expect("an I/O engine");
    if let Some(note) = note {
        eprintln!("{note}");
    }
    let (store, report) = FlashStore::open(engine, config(), Now { unix: 1000, nanos: 1 }).expect("open");
    (store, report.restored)
}

fn key(i: u32) -> Vec<u8> {
    format!("file:{i}").into_bytes()
}

/// Inserts, overwrites, deletes; then looks every key up at queue depth 32.
fn workload(store: &mut FlashStore, write: bool) -> Found {
    let now = Now { unix: 1000, nanos: 2 };
    if write {
        for i in 0..20_000u32 {
            let value = vec![b'a' + (i % 26) as u8; 50 + (i as usize * 7) % 900];
            let meta = ItemMeta { flags: i, expiry: 0, cas: u64::from(i) + 1, state: 0 };
            while store.insert(KeyHash::of(&key(i)), &key(i), &value, meta, now) == InsertOutcome::Busy {
                store.wait(now, &mut Vec::new());
            }
        }
        for i in (0..20_000u32).step_by(7) {
            store.delete(KeyHash::of(&key(i)));
        }
        for i in (0..20_000u32).step_by(11) {
            while store.insert(KeyHash::of(&key(i)), &key(i), b"overwritten", ItemMeta::default(), now)
                == InsertOutcome::Busy
            {
                store.wait(now, &mut Vec::new());
            }
        }
    }
    let mut found = BTreeMap::new();
    let mut done: Vec<ReadDone> = Vec::new();
    let mut i = 0u32;
    while i < 20_000 || store.in_flight() > 0 {
        while i < 20_000 && store.in_flight() < 32 {
            match store.lookup(KeyHash::of(&key(i)), &key(i), u64::from(i), now) {
                Lookup::Hit(item) => drop(found.insert(i, Some(item.value))),
                Lookup::Miss => drop(found.insert(i, None)),
                Lookup::Pending => {}
                Lookup::Busy => break,
            }
            i += 1;
        }
        store.wait(now, &mut done);
        for d in done.drain(..) {
            found.insert(d.token as u32, d.item.map(|item| item.value));
        }
    }
    found
}

/// What a workload found: each key's value, or None for a miss.
type Found = BTreeMap<u32, Option<Vec<u8>>>;

fn run(io: FlashIo, dir: &Path) -> (Found, Found) {
    let path = dir.join(format!("flash-{io:?}.bin"));
    let _ = std::fs::remove_file(&path);
    let (mut store, restored) = open(&path, io);
    assert!(!restored);
    let first = workload(&mut store, true);
    store.close(Now { unix: 1000, nanos: 3 }).expect("a clean close");
    let (mut store, restored) = open(&path, io);
    assert!(restored, "{io:?}: the clean close is restored");
    let second = workload(&mut store, false);
    store.close(Now { unix: 1000, nanos: 4 }).expect("a clean close");
    std::fs::remove_file(&path).unwrap();
    (first, second)
}

#[test]
fn io_uring_and_the_thread_pool_give_the_same_answers() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let threads = run(FlashIo::Threads, dir);
    let uring = run(FlashIo::Uring, dir);
    assert_eq!(threads.0.len(), 20_000);
    assert_eq!(threads.0, threads.1, "a clean restart serves the same");
    for i in 0..20_000u32 {
        let expected = if i % 11 == 0 {
            Some(b"overwritten".to_vec())
        } else if i % 7 == 0 {
            None
        } else {
            Some(vec![b'a' + (i % 26) as u8; 50 + (i as usize * 7) % 900])
        };
        assert_eq!(threads.0[&i], expected, "key {i}");
    }
    assert!(uring == threads, "io_uring and threads differ");
}

/// One request through `engine`, waited for.
fn one(engine: &mut dyn tierkv_engine::flash::IoEngine, op: IoOp) -> Completion {
    engine.submit(op);
    engine.flush();
    let mut done = Vec::new();
    while done.is_empty() {
        engine.wait(&mut done);
    }
    done.pop().expect("one completion")
}

/// A request's bytes may start inside its buffer (`at`): a write sends only those pages, and a
/// read fills only those, through either engine.
#[test]
fn both_engines_write_and_read_from_inside_a_buffer() {
    const PAGE: usize = 4096;
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    for io in [FlashIo::Threads, FlashIo::Uring] {
        let path = dir.join(format!("at-{io:?}.bin"));
        let _ = std::fs::remove_file(&path);
        let (file, _direct) = open_file(&path, 16 * PAGE as u64).expect("the file opens");
        let (mut engine, _) = engine_for(io, &file, 4).expect("an I/O engine");
        let mut buf = AlignedBuf::new(4 * PAGE);
        for (i, page) in buf.chunks_mut(PAGE).enumerate() {
            page.fill(b'a' + i as u8);
        }
        // Pages 1 and 2 of the buffer go to the file's pages 5 and 6.
        let op = IoOp { kind: IoKind::Write, offset: 5 * PAGE as u64, buf, at: PAGE, len: 2 * PAGE, token: 1 };
        let c = one(engine.as_mut(), op);
        assert_eq!(c.result, Ok(2 * PAGE), "{io:?}");
        // The file's pages 4..8 into the buffer's pages 1..5.
        let op = IoOp {
            kind: IoKind::Read,
            offset: 4 * PAGE as u64,
            buf: AlignedBuf::new(6 * PAGE),
            at: PAGE,
            len: 4 * PAGE,
            token: 2,
        };
        let c = one(engine.as_mut(), op);
        assert_eq!(c.result, Ok(4 * PAGE), "{io:?}");
        let firsts: Vec<u8> = c.buf.chunks(PAGE).map(|p| p[0]).collect();
        assert_eq!(firsts, [0, 0, b'b', b'c', 0, 0], "{io:?}");
        assert!(c.buf.chunks(PAGE).all(|p| p.iter().all(|&b| b == p[0])), "{io:?}: whole pages");
        drop(engine);
        std::fs::remove_file(&path).unwrap();
    }
}
