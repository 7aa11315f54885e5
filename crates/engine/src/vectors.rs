//! KV-Direct's vector values: an item whose value is a typed array, updated element-wise on the
//! owning core, so clients never read-modify-write it. `get` returns the value as stored:
//!
//! ```text
//!   0 magic "TV" | 2 type u8 (0 i64, 1 u64, 2 f64, 3 f32) | 3 version u8 (1) | 4 length u32 LE
//!   8 elements, little-endian, length x (8 or 4) bytes
//! ```
//!
//! `vector_update_many` applies several updates of one key with one lookup and one write.

use crate::hash::KeyHash;
use crate::item::ItemHeader;
use crate::ops::check_size;
use crate::storage::{NewValue, Prior, Storage};
use crate::time::expiry_from_exptime;
use crate::types::EngineError;
pub use crate::types::VectorError;

/// Bytes of a vector's header (element type and length).
pub(crate) const VECTOR_HEADER: usize = 8;
const MAGIC: [u8; 2] = *b"TV";
const VERSION: u8 = 1;

/// An element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElemType {
    /// Signed 64-bit integers.
    I64,
    /// Unsigned 64-bit integers.
    U64,
    /// 64-bit floats.
    F64,
    /// 32-bit floats.
    F32,
}

impl ElemType {
    /// Bytes per element.
    pub fn bytes(self) -> usize {
        if self == ElemType::F32 {
            4
        } else {
            8
        }
    }
    fn code(self) -> u8 {
        self as u8
    }
    fn from_code(code: u8) -> Option<ElemType> {
        [ElemType::I64, ElemType::U64, ElemType::F64, ElemType::F32].get(usize::from(code)).copied()
    }
}

/// What an update does to each element of the slice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VectorOp {
    /// Adds to each element.
    Add,
    /// Keeps the smaller of each pair.
    Min,
    /// Keeps the larger of each pair.
    Max,
    /// Overwrites the elements.
    Set,
}

/// One update: `data` holds little-endian elements of `elem`, applied from element `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VectorUpdate<'a> {
    /// What it does to each element.
    pub op: VectorOp,
    /// The element type the data holds.
    pub elem: ElemType,
    /// The first element it touches.
    pub offset: u32,
    /// The operands, little-endian.
    pub data: &'a [u8],
}

/// A vector's element type and length, if `value` is one.
pub fn vector_header(value: &[u8]) -> Option<(ElemType, u32)> {
    if value.len() < VECTOR_HEADER || value[..2] != MAGIC || value[3] != VERSION {
        return None;
    }
    let elem = ElemType::from_code(value[2])?;
    let len = u32::from_le_bytes(value[4..8].try_into().expect("4 bytes"));
    (value.len() == VECTOR_HEADER + len as usize * elem.bytes()).then_some((elem, len))
}

/// The byte range of elements `offset..offset + count` in a vector's value.
pub fn vector_slice(value: &[u8], offset: u32, count: u32) -> Result<(ElemType, std::ops::Range<usize>), VectorError> {
    let (elem, len) = vector_header(value).ok_or(VectorError::NotAVector)?;
    if u64::from(offset) + u64::from(count) > u64::from(len) {
        return Err(VectorError::OutOfBounds);
    }
    let start = VECTOR_HEADER + offset as usize * elem.bytes();
    Ok((elem, start..start + count as usize * elem.bytes()))
}

fn apply_elem(elem: ElemType, op: VectorOp, cur: &mut [u8], delta: &[u8]) {
    macro_rules! numeric {
        ($t:ty, $add:expr) => {{
            let a = <$t>::from_le_bytes(cur.try_into().expect("element"));
            let b = <$t>::from_le_bytes(delta.try_into().expect("element"));
            let r: $t = match op {
                VectorOp::Add => $add(a, b),
                VectorOp::Min => {
                    if b < a {
                        b
                    } else {
                        a
                    }
                }
                VectorOp::Max => {
                    if b > a {
                        b
                    } else {
                        a
                    }
                }
                VectorOp::Set => b,
            };
            cur.copy_from_slice(&r.to_le_bytes());
        }};
    }
    match elem {
        ElemType::I64 => numeric!(i64, i64::wrapping_add),
        ElemType::U64 => numeric!(u64, u64::wrapping_add),
        ElemType::F64 => numeric!(f64, |a: f64, b: f64| a + b),
        ElemType::F32 => numeric!(f32, |a: f32, b: f32| a + b),
    }
}

/// Applies `update` to a vector value in place.
pub fn apply_update(value: &mut [u8], update: &VectorUpdate<'_>) -> Result<(), VectorError> {
    let size = update.elem.bytes();
    if !update.data.len().is_multiple_of(size) {
        return Err(VectorError::BadData);
    }
    let (elem, range) = vector_slice(value, update.offset, (update.data.len() / size) as u32)?;
    if elem != update.elem {
        return Err(VectorError::TypeMismatch);
    }
    for (cur, delta) in value[range].chunks_exact_mut(size).zip(update.data.chunks_exact(size)) {
        apply_elem(elem, update.op, cur, delta);
    }
    Ok(())
}

/// A new vector of `len` zeroes, replacing any item of the key.
pub(crate) fn vector_create<S: Storage>(
    s: &mut S,
    key: &[u8],
    elem: ElemType,
    len: u32,
    flags: u32,
    exptime: i64,
) -> Result<u64, EngineError> {
    let bytes = VECTOR_HEADER as u64 + u64::from(len) * elem.bytes() as u64;
    if bytes > s.max_item_bytes() as u64 {
        return Err(EngineError::ItemTooLarge { bytes: bytes as usize, max_bytes: s.max_item_bytes() });
    }
    let mut value = vec![0u8; bytes as usize];
    value[..2].copy_from_slice(&MAGIC);
    value[2] = elem.code();
    value[3] = VERSION;
    value[4..8].copy_from_slice(&len.to_le_bytes());
    let expiry = expiry_from_exptime(exptime, s.now());
    let header = ItemHeader { key_len: key.len(), value_len: value.len(), flags, expiry, cas: None, state: 0 };
    check_size(s.max_item_bytes(), &header)?;
    s.write(KeyHash::of(key), &header, key, NewValue::Parts([&value, &[]]), Prior::Unknown)
}

/// Applies `updates` in order to one key's vector: one lookup, one write (none if every update
/// was refused). One answer per update goes to `out`: Ok(true) applied, Ok(false) no such key.
pub(crate) fn vector_update_many<S: Storage>(
    s: &mut S,
    key: &[u8],
    updates: &[VectorUpdate<'_>],
    out: &mut Vec<Result<bool, EngineError>>,
) -> Result<(), EngineError> {
    let hash = KeyHash::of(key);
    let Some(found) = s.lookup(key, hash) else {
        out.extend(updates.iter().map(|_| Ok(false)));
        return Ok(());
    };
    let old = *S::header(&found);
    let mut value = s.value(&found).to_vec();
    let mut changed = false;
    for update in updates {
        let result = apply_update(&mut value, update).map_err(EngineError::Vector);
        changed |= result.is_ok();
        out.push(result.map(|()| true));
    }
    if changed {
        let header = ItemHeader { cas: None, state: 0, ..old };
        s.write(hash, &header, key, NewValue::Parts([&value, &[]]), Prior::Present(found))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vector(elem: ElemType, elems: &[u8]) -> Vec<u8> {
        let len = (elems.len() / elem.bytes()) as u32;
        [&MAGIC[..], &[elem.code(), VERSION], &len.to_le_bytes(), elems].concat()
    }

    #[test]
    fn updates_apply_element_wise_by_type() {
        let f32s = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let mut v = vector(ElemType::F32, &f32s(&[1.0, 2.0, 3.0]));
        let add = VectorUpdate { op: VectorOp::Add, elem: ElemType::F32, offset: 1, data: &f32s(&[10.0, 20.0]) };
        apply_update(&mut v, &add).unwrap();
        assert_eq!(&v[8..], &f32s(&[1.0, 12.0, 23.0])[..]);
        let max = VectorUpdate { op: VectorOp::Max, elem: ElemType::F32, offset: 0, data: &f32s(&[5.0, 5.0, 50.0]) };
        apply_update(&mut v, &max).unwrap();
        assert_eq!(&v[8..], &f32s(&[5.0, 12.0, 50.0])[..]);
        let i64s = |v: &[i64]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let mut w = vector(ElemType::I64, &i64s(&[i64::MAX, -1]));
        let add = VectorUpdate { op: VectorOp::Add, elem: ElemType::I64, offset: 0, data: &i64s(&[1, -1]) };
        apply_update(&mut w, &add).unwrap();
        assert_eq!(&w[8..], &i64s(&[i64::MIN, -2])[..], "integers wrap");
        let min = VectorUpdate { op: VectorOp::Min, elem: ElemType::I64, offset: 1, data: &i64s(&[-5]) };
        apply_update(&mut w, &min).unwrap();
        let set = VectorUpdate { op: VectorOp::Set, elem: ElemType::I64, offset: 0, data: &i64s(&[7]) };
        apply_update(&mut w, &set).unwrap();
        assert_eq!(&w[8..], &i64s(&[7, -5])[..]);
    }

    #[test]
    fn type_bounds_and_shape_errors_change_nothing() {
        let mut v = vector(ElemType::U64, &[0u8; 16]);
        let before = v.clone();
        let update = |elem, offset, data: &'static [u8]| VectorUpdate { op: VectorOp::Add, elem, offset, data };
        assert_eq!(apply_update(&mut v, &update(ElemType::I64, 0, &[0; 8])), Err(VectorError::TypeMismatch));
        assert_eq!(apply_update(&mut v, &update(ElemType::U64, 1, &[0; 16])), Err(VectorError::OutOfBounds));
        assert_eq!(apply_update(&mut v, &update(ElemType::U64, u32::MAX, &[0; 8])), Err(VectorError::OutOfBounds));
        assert_eq!(apply_update(&mut v, &update(ElemType::U64, 0, &[0; 5])), Err(VectorError::BadData));
        assert_eq!(
            apply_update(&mut b"plain value".to_vec(), &update(ElemType::U64, 0, &[0; 8])),
            Err(VectorError::NotAVector)
        );
        assert_eq!(v, before);
        assert_eq!(vector_header(&v), Some((ElemType::U64, 2)));
        assert_eq!(vector_header(&v[..15]), None, "a truncated vector is not one");
        assert_eq!(vector_slice(&v, 1, 1).map(|(_, r)| r), Ok(16..24));
    }
}
