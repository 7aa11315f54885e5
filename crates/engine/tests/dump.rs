//! The bounded walk behind `lru_crawler metadump`: every live item exactly once, in both modes,
//! whatever the step size; deleted and expired items never.

use std::collections::BTreeMap;
use tierkv_engine::Engine;
use tierkv_engine::{AnyPartition, Mode, PartitionConfig};

fn dump_all(partition: &mut AnyPartition, step: usize) -> BTreeMap<Vec<u8>, (usize, bool)> {
    let mut seen = BTreeMap::new();
    let mut cursor = Some(0);
    let mut steps = 0;
    while let Some(at) = cursor {
        cursor = partition.dump_step(at, step, &mut |key, debug| {
            let fresh = seen.insert(key.to_vec(), (debug.value_len, debug.fetched)).is_none();
            assert!(fresh, "{key:?} visited twice");
        });
        steps += 1;
        assert!(steps < 1 << 20, "the walk ends");
    }
    seen
}

#[test]
fn a_dump_visits_every_live_item_once_in_both_modes() {
    for mode in [Mode::Cache, Mode::Store] {
        let mut partition = AnyPartition::new(mode, &PartitionConfig::new(8 << 20)).unwrap();
        partition.set_clock(1_000_000);
        for i in 0..3000u32 {
            let value = vec![b'v'; (i % 50) as usize];
            partition.set(format!("key:{i}").as_bytes(), &value, 0, if i % 7 == 0 { 10 } else { 0 }).unwrap();
        }
        for i in (0..3000u32).step_by(3) {
            partition.delete(format!("key:{i}").as_bytes(), 0).unwrap();
        }
        partition.get(b"key:1").unwrap();
        // Items with a 10-second exptime are gone after 11 seconds.
        partition.set_clock(1_000_011);
        let expected: BTreeMap<Vec<u8>, (usize, bool)> = (0..3000u32)
            .filter(|i| i % 3 != 0 && i % 7 != 0)
            .map(|i| (format!("key:{i}").into_bytes(), ((i % 50) as usize, i == 1)))
            .collect();
        for step in [1, 7, 1 << 20] {
            assert_eq!(dump_all(&mut partition, step), expected, "{mode:?}, {step} buckets a step");
        }
    }
}
