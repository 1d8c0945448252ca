//! Element types and PyTorch's type-promotion rules.
//!
//! The numeric codes are PyTorch's `c10::ScalarType` values, so the PyTorch
//! frontend passes dtypes through unchanged and the C ABI needs no table.

use std::fmt;

use crate::pjrt::ElementType;

#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(i32)]
pub enum DType {
    U8 = 0,
    I8 = 1,
    I16 = 2,
    I32 = 3,
    I64 = 4,
    F16 = 5,
    F32 = 6,
    F64 = 7,
    C64 = 9,
    C128 = 10,
    Bool = 11,
    BF16 = 15,
}

/// The kind of a Python scalar, which is all that matters for promotion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScalarKind {
    Bool,
    Int,
    Float,
    Complex,
}

impl DType {
    pub const ALL: [DType; 12] = [
        DType::U8,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::F16,
        DType::F32,
        DType::F64,
        DType::C64,
        DType::C128,
        DType::Bool,
        DType::BF16,
    ];

    /// The default floating dtype (`torch.get_default_dtype()`).
    pub const DEFAULT_FLOAT: DType = DType::F32;

    pub fn from_code(code: i32) -> Option<DType> {
        DType::ALL.into_iter().find(|d| *d as i32 == code)
    }

    /// A name for a code we do not support, for error messages.
    pub fn describe_code(code: i32) -> String {
        match DType::from_code(code) {
            Some(d) => d.to_string(),
            None => match code {
                8 => "complex32 (code 8)".into(),
                12..=14 => format!("quantized type (code {code})"),
                23 | 24 => format!("float8 (code {code})"),
                _ => format!("unknown dtype code {code}"),
            },
        }
    }

    pub fn code(self) -> i32 {
        self as i32
    }

    /// PyTorch's name (`torch.float32` prints as `float32`).
    pub fn name(self) -> &'static str {
        match self {
            DType::U8 => "uint8",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::F16 => "float16",
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::C64 => "complex64",
            DType::C128 => "complex128",
            DType::Bool => "bool",
            DType::BF16 => "bfloat16",
        }
    }

    pub fn size(self) -> usize {
        self.element_type().byte_size()
    }

    /// Real floating point (PyTorch's `is_floating_point`: not complex).
    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }

    pub fn is_complex(self) -> bool {
        matches!(self, DType::C64 | DType::C128)
    }

    /// The type of a complex dtype's parts (`torch.real`'s dtype); any other
    /// dtype is its own.
    pub fn real(self) -> DType {
        match self {
            DType::C64 => DType::F32,
            DType::C128 => DType::F64,
            d => d,
        }
    }

    /// Integral, not counting bool (PyTorch's `isIntegralType(t, false)`).
    pub fn is_int(self) -> bool {
        matches!(self, DType::U8 | DType::I8 | DType::I16 | DType::I32 | DType::I64)
    }

    pub fn is_bool(self) -> bool {
        self == DType::Bool
    }

    pub fn is_signed(self) -> bool {
        !matches!(self, DType::U8 | DType::Bool)
    }

    /// Half-precision types compute in f32 ("opmath"), as PyTorch does on CPU.
    pub fn opmath(self) -> DType {
        match self {
            DType::F16 | DType::BF16 => DType::F32,
            d => d,
        }
    }

    pub fn kind(self) -> ScalarKind {
        if self.is_complex() {
            ScalarKind::Complex
        } else if self.is_float() {
            ScalarKind::Float
        } else if self.is_bool() {
            ScalarKind::Bool
        } else {
            ScalarKind::Int
        }
    }

    pub fn element_type(self) -> ElementType {
        match self {
            DType::U8 => ElementType::U8,
            DType::I8 => ElementType::S8,
            DType::I16 => ElementType::S16,
            DType::I32 => ElementType::S32,
            DType::I64 => ElementType::S64,
            DType::F16 => ElementType::F16,
            DType::F32 => ElementType::F32,
            DType::F64 => ElementType::F64,
            DType::C64 => ElementType::C64,
            DType::C128 => ElementType::C128,
            DType::Bool => ElementType::Pred,
            DType::BF16 => ElementType::BF16,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl ScalarKind {
    /// The dtype a wrapped Python scalar of this kind has in promotion.
    pub fn default_dtype(self) -> DType {
        match self {
            ScalarKind::Bool => DType::Bool,
            ScalarKind::Int => DType::I64,
            ScalarKind::Float => DType::DEFAULT_FLOAT,
            ScalarKind::Complex => DType::C64,
        }
    }
}

/// `torch.promote_types(a, b)`.
pub fn promote_types(a: DType, b: DType) -> DType {
    use DType::*;
    if a == b {
        return a;
    }
    if a == Bool {
        return b;
    }
    if b == Bool {
        return a;
    }
    // A complex type wins, with parts wide enough for both operands'
    // (complex64 with float64 is complex128).
    if a.is_complex() || b.is_complex() {
        let part = |d: DType| if d.is_complex() || d.is_float() { d.real() } else { F16 };
        let parts = promote_types(part(a), part(b));
        return if parts == F64 { C128 } else { C64 };
    }
    match (a.is_float(), b.is_float()) {
        (true, false) => return a,
        (false, true) => return b,
        (true, true) => {
            if matches!((a, b), (F16, BF16) | (BF16, F16)) {
                return F32;
            }
            return if a.size() >= b.size() { a } else { b };
        }
        (false, false) => {}
    }
    // Both integral. uint8 with a signed type needs the next wider signed type.
    match (a, b) {
        (U8, I8) | (I8, U8) => I16,
        (U8, x) | (x, U8) => x,
        _ => {
            if a.size() >= b.size() {
                a
            } else {
                b
            }
        }
    }
}

/// Whether `from` may be written into a tensor of type `to` by an in-place
/// op (PyTorch's `canCast`): no float to integral, nothing non-bool to bool.
pub fn can_cast(from: DType, to: DType) -> bool {
    if from.is_complex() && !to.is_complex() {
        return false;
    }
    if from.is_float() && !(to.is_float() || to.is_complex()) {
        return false;
    }
    if !from.is_bool() && to.is_bool() {
        return false;
    }
    true
}

/// One operand of a result-type computation.
#[derive(Debug, Clone, Copy)]
pub enum Operand {
    /// A tensor with at least one dimension.
    Dim(DType),
    /// A zero-dimensional tensor.
    ZeroDim(DType),
    /// A Python scalar ("wrapped number").
    Scalar(ScalarKind),
}

/// `torch.result_type` over several operands: dimensioned tensors win over
/// zero-dim tensors, which win over scalars, unless a lower tier has a higher
/// category (bool < integral < floating).
pub fn result_type(operands: &[Operand]) -> DType {
    let (mut dim, mut zero, mut wrapped): (Option<DType>, Option<DType>, Option<DType>) = (None, None, None);
    let up = |slot: &mut Option<DType>, d: DType| *slot = Some(slot.map_or(d, |s| promote_types(s, d)));
    for op in operands {
        match *op {
            Operand::Dim(d) => up(&mut dim, d),
            Operand::ZeroDim(d) => up(&mut zero, d),
            Operand::Scalar(k) => up(&mut wrapped, k.default_dtype()),
        }
    }
    combine(dim, combine(zero, wrapped))
        .expect("result_type needs at least one operand")
}

fn combine(higher: Option<DType>, lower: Option<DType>) -> Option<DType> {
    match (higher, lower) {
        (None, l) => l,
        (h, None) => h,
        (Some(h), Some(l)) => {
            if h.kind() >= l.kind() {
                Some(h)
            } else if h == DType::Bool || l.kind() > h.kind() {
                Some(promote_types(h, l))
            } else {
                Some(h)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::DType::*;
    use super::*;

    #[test]
    fn promote_table_matches_pytorch() {
        // Values from torch.promote_types.
        let cases = [
            (U8, I8, I16),
            (U8, I32, I32),
            (I8, I16, I16),
            (I32, I64, I64),
            (Bool, U8, U8),
            (Bool, F16, F16),
            (F16, BF16, F32),
            (BF16, F32, F32),
            (I64, F16, F16),
            (I64, BF16, BF16),
            (F32, F64, F64),
            (U8, F32, F32),
            (I16, U8, I16),
            (C64, F64, C128),
            (C64, F32, C64),
            (C64, F16, C64),
            (C64, I64, C64),
            (Bool, C64, C64),
            (C64, C128, C128),
        ];
        for (a, b, want) in cases {
            assert_eq!(promote_types(a, b), want, "{a} + {b}");
            assert_eq!(promote_types(b, a), want, "{b} + {a}");
        }
    }

    #[test]
    fn result_type_tiers() {
        use Operand::*;
        // torch.result_type(torch.ones(2, dtype=f16), 2.5) == float16
        assert_eq!(result_type(&[Dim(F16), Scalar(ScalarKind::Float)]), F16);
        // int tensor + float scalar -> default float
        assert_eq!(result_type(&[Dim(I32), Scalar(ScalarKind::Float)]), F32);
        // int tensor + int scalar stays int32
        assert_eq!(result_type(&[Dim(I32), Scalar(ScalarKind::Int)]), I32);
        // f16 tensor + 0-dim f64 tensor -> f16
        assert_eq!(result_type(&[Dim(F16), ZeroDim(F64)]), F16);
        // int tensor + 0-dim float tensor -> 0-dim's dtype
        assert_eq!(result_type(&[Dim(I64), ZeroDim(F64)]), F64);
        // bool tensor + int scalar -> int64
        assert_eq!(result_type(&[Dim(Bool), Scalar(ScalarKind::Int)]), I64);
        // u8 tensor + 0-dim i8 -> u8 (same category, dimensioned wins)
        assert_eq!(result_type(&[Dim(U8), ZeroDim(I8)]), U8);
        // two dimensioned tensors promote normally
        assert_eq!(result_type(&[Dim(U8), Dim(I8)]), I16);
        // bool + bool scalar
        assert_eq!(result_type(&[Dim(Bool), Scalar(ScalarKind::Bool)]), Bool);
        // float tensor * 1j -> complex64; float64 tensor * 1j -> complex128
        assert_eq!(result_type(&[Dim(F32), Scalar(ScalarKind::Complex)]), C64);
        assert_eq!(result_type(&[Dim(F64), Scalar(ScalarKind::Complex)]), C128);
        // complex64 tensor + 0-dim float64 -> complex64 (same category wins)
        assert_eq!(result_type(&[Dim(C64), ZeroDim(F64)]), C64);
    }

    #[test]
    fn casting_rules() {
        assert!(can_cast(I64, F32));
        assert!(!can_cast(F32, I64));
        assert!(!can_cast(I64, Bool));
        assert!(can_cast(F32, C64) && !can_cast(C64, F64));
        assert!(can_cast(Bool, I64));
    }

    #[test]
    fn codes_roundtrip() {
        for d in DType::ALL {
            assert_eq!(DType::from_code(d.code()), Some(d));
        }
        assert_eq!(DType::from_code(8), None);
        assert!(DType::describe_code(8).contains("complex32"));
    }
}
