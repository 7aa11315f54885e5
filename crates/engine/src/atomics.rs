//! KV-Direct's server-side atomics on counters stored as ASCII decimal (so `get` and `incr` see
//! the same value): fetch-and-add, compare-and-swap on the number, min, max, and, or, xor, on
//! 64-bit unsigned or signed counters. `atomic_many` applies several requests on one key with
//! one lookup and one write (hot-key combining), each request getting exactly the answer it
//! would have had alone, in order.

use crate::hash::KeyHash;
use crate::item::ItemHeader;
use crate::numeric::{parse_counter, CounterValue};
use crate::ops::check_size;
use crate::storage::{NewValue, Prior, Storage};
use crate::types::EngineError;

/// How the stored digits are read and the operands compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CounterKind {
    /// memcached's counters: 0..=2^64-1.
    U64,
    /// -2^63..=2^63-1, written with a leading '-' when negative.
    I64,
}

/// One atomic operation. Operands are 64-bit patterns, read as the counter's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicOp {
    /// Adds (two's complement, wrapping) and answers the old value.
    Add(u64),
    /// Sets `new` if the value equals `expected`; otherwise answers the current value.
    Cas {
        /// The value it must hold.
        expected: u64,
        /// The value it gets if it does.
        new: u64,
    },
    /// Keeps the smaller of the two.
    Min(u64),
    /// Keeps the larger of the two.
    Max(u64),
    /// Bitwise and.
    And(u64),
    /// Bitwise or.
    Or(u64),
    /// Bitwise exclusive or.
    Xor(u64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
/// One atomic operation on a counter.
pub struct AtomicRequest {
    /// What it does.
    pub op: AtomicOp,
    /// How the counter's bytes are read.
    pub kind: CounterKind,
}

/// What an atomic did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicOutcome {
    /// The value before and after (equal when the operation changed nothing).
    Done {
        /// The value before.
        old: u64,
        /// The value after.
        new: u64,
    },
    /// `Cas` found another value: the current one.
    Mismatch {
        /// The value it holds.
        current: u64,
    },
    /// No such key.
    NotFound,
}

/// Reads a stored counter as `kind`; None if it is not one.
pub(crate) fn read_counter(value: &[u8], kind: CounterKind) -> Option<u64> {
    match kind {
        CounterKind::U64 => parse_counter(value),
        CounterKind::I64 => {
            let text = std::str::from_utf8(value).ok()?;
            text.trim_matches(|c: char| c.is_ascii_whitespace()).parse::<i64>().ok().map(|v| v as u64)
        }
    }
}

/// Applies `request` to `value`: (outcome, the value afterwards).
pub(crate) fn apply(value: u64, request: &AtomicRequest) -> (AtomicOutcome, u64) {
    let signed = request.kind == CounterKind::I64;
    let pick = |a: u64, b: u64, min: bool| {
        let a_first = if signed { (a as i64) <= (b as i64) } else { a <= b };
        if a_first == min {
            a
        } else {
            b
        }
    };
    let new = match request.op {
        AtomicOp::Add(delta) => value.wrapping_add(delta),
        AtomicOp::Cas { expected, new } => {
            if value != expected {
                return (AtomicOutcome::Mismatch { current: value }, value);
            }
            new
        }
        AtomicOp::Min(v) => pick(value, v, true),
        AtomicOp::Max(v) => pick(value, v, false),
        AtomicOp::And(v) => value & v,
        AtomicOp::Or(v) => value | v,
        AtomicOp::Xor(v) => value ^ v,
    };
    (AtomicOutcome::Done { old: value, new }, new)
}

/// Applies `requests` in order to one key: one lookup, one write (none if nothing changed).
/// Every request must have the same kind; answers go to `out`, one per request.
pub(crate) fn atomic_many<S: Storage>(
    s: &mut S,
    key: &[u8],
    requests: &[AtomicRequest],
    out: &mut Vec<Result<AtomicOutcome, EngineError>>,
) -> Result<(), EngineError> {
    let Some(first) = requests.first() else { return Ok(()) };
    let hash = KeyHash::of(key);
    let Some(found) = s.lookup(key, hash) else {
        out.extend(requests.iter().map(|_| Ok(AtomicOutcome::NotFound)));
        return Ok(());
    };
    let old = *S::header(&found);
    let Some(start) = read_counter(s.value(&found), first.kind) else {
        out.extend(requests.iter().map(|_| Err(EngineError::NonNumeric)));
        return Ok(());
    };
    let mut value = start;
    for request in requests {
        let (outcome, next) = apply(value, request);
        value = next;
        out.push(Ok(outcome));
    }
    if value == start {
        return Ok(());
    }
    let counter = match first.kind {
        CounterKind::U64 => CounterValue::new(value, 0),
        CounterKind::I64 => CounterValue::signed(value as i64),
    };
    let header = ItemHeader { value_len: counter.value_len, cas: None, state: 0, ..old };
    check_size(s.max_item_bytes(), &header)?;
    s.write(hash, &header, key, NewValue::Counter(counter), Prior::Present(found))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(op: AtomicOp, kind: CounterKind) -> AtomicRequest {
        AtomicRequest { op, kind }
    }

    #[test]
    fn operations_follow_their_kind() {
        use AtomicOp::*;
        use CounterKind::*;
        let neg = |v: i64| v as u64;
        assert_eq!(apply(5, &req(Add(3), U64)), (AtomicOutcome::Done { old: 5, new: 8 }, 8));
        assert_eq!(apply(u64::MAX, &req(Add(2), U64)).1, 1, "u64 wraps like incr");
        assert_eq!(apply(neg(-5), &req(Add(neg(-3)), I64)).1, neg(-8));
        assert_eq!(apply(i64::MAX as u64, &req(Add(1), I64)).1, neg(i64::MIN), "i64 wraps");
        assert_eq!(apply(7, &req(Cas { expected: 7, new: 9 }, U64)).1, 9);
        assert_eq!(apply(7, &req(Cas { expected: 6, new: 9 }, U64)), (AtomicOutcome::Mismatch { current: 7 }, 7));
        assert_eq!(apply(neg(-1), &req(Min(3), I64)).1, neg(-1), "signed: -1 < 3");
        assert_eq!(apply(neg(-1), &req(Min(3), U64)).1, 3, "unsigned: 2^64-1 > 3");
        assert_eq!(apply(neg(-1), &req(Max(3), I64)).1, 3);
        assert_eq!(apply(0b1100, &req(And(0b1010), U64)).1, 0b1000);
        assert_eq!(apply(0b1100, &req(Or(0b1010), U64)).1, 0b1110);
        assert_eq!(apply(0b1100, &req(Xor(0b1010), U64)).1, 0b0110);
    }

    #[test]
    fn counters_read_as_their_kind() {
        assert_eq!(read_counter(b"42", CounterKind::U64), Some(42));
        assert_eq!(read_counter(b"-42", CounterKind::U64), None);
        assert_eq!(read_counter(b"-42", CounterKind::I64), Some((-42i64) as u64));
        assert_eq!(read_counter(b"9  ", CounterKind::I64), Some(9), "memcached's padding");
        assert_eq!(read_counter(b"9223372036854775808", CounterKind::I64), None, "i64 overflow");
        assert_eq!(read_counter(b"18446744073709551615", CounterKind::U64), Some(u64::MAX));
        assert_eq!(read_counter(b"x", CounterKind::I64), None);
    }
}
