//! Tensors are views `(storage, offset, sizes, strides)` over a [`Storage`],
//! which is PyTorch's own model; and [`Value`], the argument and result type
//! of an op call (PyTorch's IValue).

use std::sync::Arc;

use half::{bf16, f16};

use crate::dtype::{DType, ScalarKind};
use crate::error::{Error, Result};
use crate::hlo::Elem;
use crate::rng::Generator;
use crate::shape::{self, Dims};
use crate::storage::Storage;

/// A view over a storage. Cloning makes another handle to the same view.
///
/// Thread-safe (`Send + Sync`); the storage handles concurrent writes.
#[derive(Clone)]
pub struct Tensor {
    storage: Arc<Storage>,
    offset: i64,
    sizes: Dims,
    strides: Dims,
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Tensor({} {} on tpu:{}, strides {}, offset {})",
            self.dtype(),
            shape::fmt(&self.sizes),
            self.device(),
            shape::fmt(&self.strides),
            self.offset
        )
    }
}

impl Tensor {
    /// A contiguous tensor covering all of `storage`.
    pub fn from_storage(storage: Arc<Storage>, sizes: &[i64]) -> Tensor {
        debug_assert_eq!(shape::numel(sizes), storage.numel());
        Tensor { storage, offset: 0, sizes: sizes.into(), strides: shape::contiguous_strides(sizes) }
    }

    /// Another view of the same storage. Checks that the view stays inside it.
    pub fn view_of(&self, op: &str, offset: i64, sizes: &[i64], strides: &[i64]) -> Result<Tensor> {
        if sizes.len() != strides.len() {
            return Err(Error::op(op, format!("sizes {} and strides {} differ in rank", shape::fmt(sizes), shape::fmt(strides))));
        }
        if sizes.iter().any(|&s| s < 0) || strides.iter().any(|&s| s < 0) || offset < 0 {
            return Err(Error::op(
                op,
                format!("negative size, stride or offset: sizes {}, strides {}, offset {offset}", shape::fmt(sizes), shape::fmt(strides)),
            ));
        }
        // Checked: a stride of 2^62 must be refused here, not wrap into a
        // view that passes the bounds check.
        let extent = shape::strided_extent(op, sizes, strides)?;
        if extent > 0 {
            let last = offset.checked_add(extent - 1).unwrap_or(i64::MAX);
            if last >= self.storage.numel() {
                return Err(Error::op(
                    op,
                    format!(
                        "view with sizes {}, strides {} and offset {offset} reaches element {last}, \
                         out of bounds for a storage of {} elements",
                        shape::fmt(sizes),
                        shape::fmt(strides),
                        self.storage.numel()
                    ),
                ));
            }
        }
        Ok(Tensor { storage: self.storage.clone(), offset, sizes: sizes.into(), strides: strides.into() })
    }

    pub fn storage(&self) -> &Arc<Storage> {
        &self.storage
    }
    pub fn dtype(&self) -> DType {
        self.storage.dtype()
    }
    pub fn device(&self) -> usize {
        self.storage.device()
    }
    pub fn sizes(&self) -> &[i64] {
        &self.sizes
    }
    pub fn strides(&self) -> &[i64] {
        &self.strides
    }
    pub fn offset(&self) -> i64 {
        self.offset
    }
    pub fn rank(&self) -> usize {
        self.sizes.len()
    }
    pub fn numel(&self) -> i64 {
        shape::numel(&self.sizes)
    }
    pub fn is_contiguous(&self) -> bool {
        shape::is_contiguous(&self.sizes, &self.strides)
    }
    /// Contiguous, starting at 0 and covering the whole storage: the view is
    /// the storage's buffer, reshaped.
    pub fn is_whole_storage(&self) -> bool {
        self.offset == 0 && self.is_contiguous() && self.numel() == self.storage.numel()
    }
    pub fn same_storage(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.storage, &other.storage)
    }
}

/// A Python scalar.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    Bool(bool),
    Int(i64),
    Float(f64),
}

impl Scalar {
    pub fn kind(self) -> ScalarKind {
        match self {
            Scalar::Bool(_) => ScalarKind::Bool,
            Scalar::Int(_) => ScalarKind::Int,
            Scalar::Float(_) => ScalarKind::Float,
        }
    }
    pub fn to_f64(self) -> f64 {
        match self {
            Scalar::Bool(b) => b as i64 as f64,
            Scalar::Int(i) => i as f64,
            Scalar::Float(f) => f,
        }
    }
    pub fn to_i64(self) -> i64 {
        match self {
            Scalar::Bool(b) => b as i64,
            Scalar::Int(i) => i,
            Scalar::Float(f) => f as i64,
        }
    }
    /// The exact bits, for hashing static scalars into cache keys.
    pub fn bits(self) -> (u8, u64) {
        match self {
            Scalar::Bool(b) => (0, b as u64),
            Scalar::Int(i) => (1, i as u64),
            Scalar::Float(f) => (2, f.to_bits()),
        }
    }
    /// Little-endian bytes of this scalar as an `elem`, for runtime scalar
    /// arguments.
    pub fn host_bytes(self, elem: Elem) -> Vec<u8> {
        let (f, i) = match self {
            Scalar::Float(x) => (x, x as i64),
            Scalar::Int(x) => (x as f64, x),
            Scalar::Bool(b) => (b as i64 as f64, b as i64),
        };
        match elem {
            Elem::Pred => vec![(f != 0.0) as u8],
            Elem::I8 => (i as i8).to_le_bytes().to_vec(),
            Elem::I16 => (i as i16).to_le_bytes().to_vec(),
            Elem::I32 => (i as i32).to_le_bytes().to_vec(),
            Elem::I64 => i.to_le_bytes().to_vec(),
            Elem::U8 => (i as u8).to_le_bytes().to_vec(),
            Elem::U32 => (i as u32).to_le_bytes().to_vec(),
            Elem::U64 => (i as u64).to_le_bytes().to_vec(),
            Elem::F16 => f16::from_f64(f).to_le_bytes().to_vec(),
            Elem::BF16 => bf16::from_f64(f).to_le_bytes().to_vec(),
            Elem::F32 => (f as f32).to_le_bytes().to_vec(),
            Elem::F64 => f.to_le_bytes().to_vec(),
            // A real value: the imaginary part is zero.
            Elem::C64 => [(f as f32).to_le_bytes(), 0f32.to_le_bytes()].concat(),
            Elem::C128 => [f.to_le_bytes(), 0f64.to_le_bytes()].concat(),
        }
    }
}

impl std::fmt::Display for Scalar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scalar::Bool(b) => write!(f, "{}", if *b { "True" } else { "False" }),
            Scalar::Int(i) => write!(f, "{i}"),
            Scalar::Float(x) => write!(f, "{x}"),
        }
    }
}

/// An op argument or result, like PyTorch's IValue.
#[derive(Debug, Clone)]
pub enum Value {
    None,
    Tensor(Tensor),
    TensorList(Vec<Tensor>),
    /// `Tensor?[]`, e.g. the indices of `aten::index.Tensor`.
    OptTensorList(Vec<Option<Tensor>>),
    Int(i64),
    Double(f64),
    Bool(bool),
    Str(String),
    IntList(Vec<i64>),
    /// `float[]`, e.g. the `range` of `histogram`.
    FloatList(Vec<f64>),
    Scalar(Scalar),
    DType(DType),
    /// A random generator for a `Generator?` argument (a handle: the call
    /// draws from, and advances, the generator it names).
    Generator(Generator),
}

impl Value {
    /// A short name of the variant, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Tensor(_) => "Tensor",
            Value::TensorList(_) => "Tensor[]",
            Value::OptTensorList(_) => "Tensor?[]",
            Value::Int(_) => "int",
            Value::Double(_) => "float",
            Value::Bool(_) => "bool",
            Value::Str(_) => "str",
            Value::IntList(_) => "int[]",
            Value::FloatList(_) => "float[]",
            Value::Scalar(_) => "Scalar",
            Value::DType(_) => "ScalarType",
            Value::Generator(_) => "Generator",
        }
    }

    pub fn as_tensor(&self) -> Option<&Tensor> {
        match self {
            Value::Tensor(t) => Some(t),
            _ => None,
        }
    }

    /// Takes the tensor out of a result value.
    pub fn into_tensor(self) -> Result<Tensor> {
        match self {
            Value::Tensor(t) => Ok(t),
            other => Err(Error::InvalidArgument(format!("expected a Tensor result, got {}", other.type_name()))),
        }
    }
}

impl From<Tensor> for Value {
    fn from(t: Tensor) -> Value {
        Value::Tensor(t)
    }
}
impl From<&Tensor> for Value {
    fn from(t: &Tensor) -> Value {
        Value::Tensor(t.clone())
    }
}
impl From<i64> for Value {
    fn from(v: i64) -> Value {
        Value::Int(v)
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::Double(v)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Value {
        Value::Bool(v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::Str(v.to_string())
    }
}
impl From<Vec<i64>> for Value {
    fn from(v: Vec<i64>) -> Value {
        Value::IntList(v)
    }
}
impl From<&[i64]> for Value {
    fn from(v: &[i64]) -> Value {
        Value::IntList(v.to_vec())
    }
}
impl From<Scalar> for Value {
    fn from(v: Scalar) -> Value {
        Value::Scalar(v)
    }
}
impl From<DType> for Value {
    fn from(v: DType) -> Value {
        Value::DType(v)
    }
}
impl From<Generator> for Value {
    fn from(v: Generator) -> Value {
        Value::Generator(v)
    }
}
impl From<&Generator> for Value {
    fn from(v: &Generator) -> Value {
        Value::Generator(v.clone())
    }
}
impl From<Vec<Tensor>> for Value {
    fn from(v: Vec<Tensor>) -> Value {
        Value::TensorList(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::StorageValue;

    #[test]
    fn view_of_checks_bounds_without_wrapping() {
        // Never read: a pending value needs no device.
        let storage = Storage::new(0, 0, DType::F32, 8, StorageValue::Pending { recording: 0, node: 0, out: 0 });
        let t = Tensor::from_storage(storage, &[8]);
        let v = t.view_of("aten::as_strided", 1, &[2, 3], &[3, 1]).unwrap();
        assert_eq!((v.offset(), v.sizes(), v.strides()), (1, &[2, 3][..], &[3, 1][..]));
        assert!(t.view_of("aten::as_strided", 0, &[0, 5], &[1 << 62, 1 << 62]).is_ok(), "empty: any strides");
        let refused = [
            (1, vec![2, 4], vec![4, 1]),                   // element 8 of 8
            (0, vec![2], vec![1 << 62]),                   // wrapped to a small extent unchecked
            (0, vec![3], vec![i64::MAX]),                  // overflows the extent
            (i64::MAX, vec![2], vec![1]),                  // overflows the offset
            (0, vec![1 << 62, 1 << 62, 2], vec![1, 1, 1]), // overflows the sum
        ];
        for (offset, sizes, strides) in refused {
            let e = t.view_of("aten::as_strided", offset, &sizes, &strides).unwrap_err();
            assert_eq!(e.code(), crate::error::Code::InvalidArgument, "{sizes:?} {strides:?} @{offset}: {e}");
            assert!(e.to_string().contains("aten::as_strided"), "{e}");
        }
    }
}
