//! The atomics against a model: random sequences of sets, deletes, incr, single atomics and
//! combined batches on a few keys, in cache and store mode. Combining must give every request
//! the answer it would have had alone, in order; `get` must see the counter's digits.

use std::collections::HashMap;

use proptest::prelude::*;
use tierkv_engine::{
    AnyPartition, ArithOutcome, ArithRequest, AtomicOp, AtomicOutcome, AtomicRequest, CounterKind, Engine, EngineError,
    Mode, PartitionConfig,
};

#[derive(Clone, Debug)]
enum Op {
    Set(u8, Vec<u8>),
    Delete(u8),
    Incr(u8, u64),
    Atomics(u8, CounterKind, Vec<AtomicOp>),
    Get(u8),
}

fn number() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..10,
        (-10i64..10).prop_map(|v| v as u64),
        any::<u64>(),
        Just(u64::MAX),
        Just(i64::MAX as u64),
        Just(i64::MIN as u64)
    ]
}

fn atomic_op() -> impl Strategy<Value = AtomicOp> {
    prop_oneof![
        number().prop_map(AtomicOp::Add),
        (number(), number()).prop_map(|(expected, new)| AtomicOp::Cas { expected, new }),
        number().prop_map(AtomicOp::Min),
        number().prop_map(AtomicOp::Max),
        number().prop_map(AtomicOp::And),
        number().prop_map(AtomicOp::Or),
        number().prop_map(AtomicOp::Xor),
    ]
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        number().prop_map(|v| v.to_string().into_bytes()),
        number().prop_map(|v| (v as i64).to_string().into_bytes()),
        Just(b"abc".to_vec()),
        Just(b"12  ".to_vec()),
        Just(Vec::new()),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let kind = prop_oneof![Just(CounterKind::U64), Just(CounterKind::I64)];
    prop_oneof![
        2 => (0u8..4, value()).prop_map(|(k, v)| Op::Set(k, v)),
        1 => (0u8..4).prop_map(Op::Delete),
        1 => (0u8..4, 0u64..100).prop_map(|(k, d)| Op::Incr(k, d)),
        5 => (0u8..4, kind, prop::collection::vec(atomic_op(), 1..6)).prop_map(|(k, kind, ops)| Op::Atomics(k, kind, ops)),
        2 => (0u8..4).prop_map(Op::Get),
    ]
}

/// The model's reading of a counter, independent of the engine's parser.
fn model_read(value: &[u8], kind: CounterKind) -> Option<u64> {
    let text = std::str::from_utf8(value).ok()?.trim_end_matches(' ');
    match kind {
        CounterKind::U64 => text.parse::<u64>().ok(),
        CounterKind::I64 => text.parse::<i64>().ok().map(|v| v as u64),
    }
}

fn model_apply(value: u64, kind: CounterKind, op: AtomicOp) -> (AtomicOutcome, u64) {
    let as_i = |v: u64| v as i64 as i128;
    let as_u = |v: u64| i128::from(v);
    let num = |v: u64| if kind == CounterKind::I64 { as_i(v) } else { as_u(v) };
    let new = match op {
        AtomicOp::Add(d) => ((num(value) + num(d)).rem_euclid(1 << 64)) as u64,
        AtomicOp::Cas { expected, new } if expected == value => new,
        AtomicOp::Cas { .. } => return (AtomicOutcome::Mismatch { current: value }, value),
        AtomicOp::Min(v) => {
            if num(v) < num(value) {
                v
            } else {
                value
            }
        }
        AtomicOp::Max(v) => {
            if num(v) > num(value) {
                v
            } else {
                value
            }
        }
        AtomicOp::And(v) => value & v,
        AtomicOp::Or(v) => value | v,
        AtomicOp::Xor(v) => value ^ v,
    };
    (AtomicOutcome::Done { old: value, new }, new)
}

fn format(value: u64, kind: CounterKind) -> Vec<u8> {
    match kind {
        CounterKind::U64 => value.to_string().into_bytes(),
        CounterKind::I64 => (value as i64).to_string().into_bytes(),
    }
}

fn run(mode: Mode, ops: &[Op]) {
    let mut engine = AnyPartition::new(mode, &PartitionConfig::new(8 << 20)).unwrap();
    let mut model: HashMap<u8, Vec<u8>> = HashMap::new();
    let key = |k: u8| format!("counter:{k}").into_bytes();
    for op in ops {
        match op {
            Op::Set(k, v) => {
                engine.set(&key(*k), v, 0, 0).unwrap();
                model.insert(*k, v.clone());
            }
            Op::Delete(k) => {
                engine.delete(&key(*k), 0).unwrap();
                model.remove(k);
            }
            Op::Incr(k, d) => {
                let got = engine.arith(&key(*k), &ArithRequest { delta: *d, decrement: false, cas: 0, initial: None });
                match model.get(k) {
                    None => assert_eq!(got, Ok(ArithOutcome::NotFound)),
                    Some(v) => match (v.is_empty(), model_read(v, CounterKind::U64)) {
                        (false, Some(n)) => {
                            let new = n.wrapping_add(*d);
                            assert!(matches!(got, Ok(ArithOutcome::Value { value, .. }) if value == new), "{got:?}");
                            let old_len = v.len();
                            let mut digits = new.to_string().into_bytes();
                            while digits.len() < old_len {
                                digits.push(b' ');
                            }
                            model.insert(*k, digits);
                        }
                        _ => assert_eq!(got, Err(EngineError::NonNumeric)),
                    },
                }
            }
            Op::Atomics(k, kind, atomics) => {
                let requests: Vec<AtomicRequest> =
                    atomics.iter().map(|&op| AtomicRequest { op, kind: *kind }).collect();
                let mut out = Vec::new();
                engine.atomic_many(&key(*k), &requests, &mut out).unwrap();
                assert_eq!(out.len(), requests.len());
                let Some(stored) = model.get(k).cloned() else {
                    assert!(out.iter().all(|o| *o == Ok(AtomicOutcome::NotFound)));
                    continue;
                };
                let Some(mut value) = model_read(&stored, *kind) else {
                    assert!(out.iter().all(|o| *o == Err(EngineError::NonNumeric)), "{stored:?} {out:?}");
                    continue;
                };
                let start = value;
                for (op, got) in atomics.iter().zip(&out) {
                    let (expected, next) = model_apply(value, *kind, *op);
                    assert_eq!(*got, Ok(expected), "{op:?} on {value}");
                    value = next;
                }
                if value != start {
                    model.insert(*k, format(value, *kind));
                }
            }
            Op::Get(k) => {
                let got = engine.get(&key(*k)).unwrap().map(|item| item.value.to_vec());
                assert_eq!(got.as_ref(), model.get(k), "get sees the counter's digits");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn atomics_match_the_model_in_cache_mode(ops in prop::collection::vec(op(), 1..60)) {
        run(Mode::Cache, &ops);
    }

    #[test]
    fn atomics_match_the_model_in_store_mode(ops in prop::collection::vec(op(), 1..60)) {
        run(Mode::Store, &ops);
    }
}

#[derive(Clone, Debug)]
enum VOp {
    Create(u8, u8, u32),
    Updates(u8, u8, Vec<(u8, u32, Vec<u8>)>),
    SetPlain(u8),
    Get(u8),
}

fn vop() -> impl Strategy<Value = VOp> {
    let update = (0u8..4, 0u32..12, prop::collection::vec(any::<u8>(), 0..40));
    prop_oneof![
        (0u8..3, 0u8..4, 0u32..10).prop_map(|(k, t, n)| VOp::Create(k, t, n)),
        (0u8..3, 0u8..4, prop::collection::vec(update, 1..5)).prop_map(|(k, t, u)| VOp::Updates(k, t, u)),
        (0u8..3).prop_map(VOp::SetPlain),
        (0u8..3).prop_map(VOp::Get),
    ]
}

fn run_vectors(mode: Mode, ops: &[VOp]) {
    use tierkv_engine::{apply_update, ElemType, VectorOp, VectorUpdate};
    let types = [ElemType::I64, ElemType::U64, ElemType::F64, ElemType::F32];
    let vops = [VectorOp::Add, VectorOp::Min, VectorOp::Max, VectorOp::Set];
    let mut engine = AnyPartition::new(mode, &PartitionConfig::new(8 << 20)).unwrap();
    let mut model: HashMap<u8, Vec<u8>> = HashMap::new();
    let key = |k: u8| format!("vector:{k}").into_bytes();
    for op in ops {
        match op {
            VOp::Create(k, t, n) => {
                engine.vector_create(&key(*k), types[usize::from(*t)], *n, 0, 0).unwrap();
                model.insert(*k, engine.get(&key(*k)).unwrap().unwrap().value.to_vec());
                assert_eq!(tierkv_engine::vector_header(&model[k]), Some((types[usize::from(*t)], *n)));
            }
            VOp::Updates(k, t, updates) => {
                let elem = types[usize::from(*t)];
                let updates: Vec<VectorUpdate<'_>> = updates
                    .iter()
                    .map(|(o, offset, data)| VectorUpdate { op: vops[usize::from(*o)], elem, offset: *offset, data })
                    .collect();
                let mut out = Vec::new();
                engine.vector_update_many(&key(*k), &updates, &mut out).unwrap();
                match model.get_mut(k) {
                    None => assert!(out.iter().all(|r| *r == Ok(false))),
                    Some(value) => {
                        for (update, got) in updates.iter().zip(&out) {
                            let expected = apply_update(value, update).map(|()| true).map_err(EngineError::Vector);
                            assert_eq!(*got, expected);
                        }
                    }
                }
            }
            VOp::SetPlain(k) => {
                engine.set(&key(*k), b"plain", 0, 0).unwrap();
                model.insert(*k, b"plain".to_vec());
            }
            VOp::Get(k) => {
                let got = engine.get(&key(*k)).unwrap().map(|item| item.value.to_vec());
                assert_eq!(got.as_ref(), model.get(k));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn vector_updates_match_the_model(ops in prop::collection::vec(vop(), 1..40), store in any::<bool>()) {
        run_vectors(if store { Mode::Store } else { Mode::Cache }, &ops);
    }
}
