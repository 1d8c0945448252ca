//! Printing StableHLO as MLIR text.
//!
//! Op lowerings build programs through [`Func`], which hands out SSA values
//! ([`V`]) and tracks the type of each, so lowering an op also infers its
//! output shapes and dtypes. Nothing here compiles or runs anything.
//!
//! Simple ops use the pretty form; ops with regions or structured attributes
//! use MLIR's generic form, which is stable across StableHLO versions.

mod func;

pub use func::{Cmp, Func, Reducer, V};

use std::fmt::{self, Write};

use half::{bf16, f16};

use crate::dtype::DType;
use crate::shape::Dims;

/// MLIR element types: every [`DType`] plus the unsigned types the RNG needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Elem {
    Pred,
    I8,
    I16,
    I32,
    I64,
    U8,
    U32,
    U64,
    F16,
    BF16,
    F32,
    F64,
    C64,
    C128,
}

impl Elem {
    pub fn mlir(self) -> &'static str {
        match self {
            Elem::Pred => "i1",
            Elem::I8 => "i8",
            Elem::I16 => "i16",
            Elem::I32 => "i32",
            Elem::I64 => "i64",
            Elem::U8 => "ui8",
            Elem::U32 => "ui32",
            Elem::U64 => "ui64",
            Elem::F16 => "f16",
            Elem::BF16 => "bf16",
            Elem::F32 => "f32",
            Elem::F64 => "f64",
            Elem::C64 => "complex<f32>",
            Elem::C128 => "complex<f64>",
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, Elem::F16 | Elem::BF16 | Elem::F32 | Elem::F64)
    }

    pub fn is_complex(self) -> bool {
        matches!(self, Elem::C64 | Elem::C128)
    }

    /// The type of a complex type's parts; any other type is its own.
    pub fn real(self) -> Elem {
        match self {
            Elem::C64 => Elem::F32,
            Elem::C128 => Elem::F64,
            e => e,
        }
    }

    /// The complex type with parts of this type (f64 parts make c128; any
    /// other type c64).
    pub fn to_complex(self) -> Elem {
        match self {
            Elem::F64 | Elem::C128 => Elem::C128,
            _ => Elem::C64,
        }
    }

    pub fn is_unsigned(self) -> bool {
        matches!(self, Elem::U8 | Elem::U32 | Elem::U64 | Elem::Pred)
    }

    pub fn element_type(self) -> crate::pjrt::ElementType {
        use crate::pjrt::ElementType as E;
        match self {
            Elem::Pred => E::Pred,
            Elem::I8 => E::S8,
            Elem::I16 => E::S16,
            Elem::I32 => E::S32,
            Elem::I64 => E::S64,
            Elem::U8 => E::U8,
            Elem::U32 => E::U32,
            Elem::U64 => E::U64,
            Elem::F16 => E::F16,
            Elem::BF16 => E::BF16,
            Elem::F32 => E::F32,
            Elem::F64 => E::F64,
            Elem::C64 => E::C64,
            Elem::C128 => E::C128,
        }
    }

    /// The dtype this element type represents, if it is one.
    pub fn dtype(self) -> Option<DType> {
        Some(match self {
            Elem::Pred => DType::Bool,
            Elem::I8 => DType::I8,
            Elem::I16 => DType::I16,
            Elem::I32 => DType::I32,
            Elem::I64 => DType::I64,
            Elem::U8 => DType::U8,
            Elem::F16 => DType::F16,
            Elem::BF16 => DType::BF16,
            Elem::F32 => DType::F32,
            Elem::F64 => DType::F64,
            Elem::C64 => DType::C64,
            Elem::C128 => DType::C128,
            Elem::U32 | Elem::U64 => return None,
        })
    }

    /// An MLIR literal for `v` in this type. Floats are printed as hex bit
    /// patterns so that values (and inf/nan) round-trip exactly.
    pub fn literal(self, v: f64) -> String {
        match self {
            Elem::Pred => (if v != 0.0 { "true" } else { "false" }).into(),
            Elem::F32 => format!("0x{:08X}", (v as f32).to_bits()),
            Elem::F64 => format!("0x{:016X}", v.to_bits()),
            Elem::F16 => format!("0x{:04X}", f16::from_f64(v).to_bits()),
            Elem::BF16 => format!("0x{:04X}", bf16::from_f64(v).to_bits()),
            // A real value: the imaginary part is zero.
            Elem::C64 | Elem::C128 => format!("({}, {})", self.real().literal(v), self.real().literal(0.0)),
            _ => format!("{}", v as i64),
        }
    }

    /// An integer literal (exact for all of i64).
    pub fn int_literal(self, v: i64) -> String {
        if self.is_float() || self.is_complex() || self == Elem::Pred {
            self.literal(v as f64)
        } else {
            v.to_string()
        }
    }
}

impl From<DType> for Elem {
    fn from(d: DType) -> Elem {
        match d {
            DType::Bool => Elem::Pred,
            DType::I8 => Elem::I8,
            DType::I16 => Elem::I16,
            DType::I32 => Elem::I32,
            DType::I64 => Elem::I64,
            DType::U8 => Elem::U8,
            DType::F16 => Elem::F16,
            DType::BF16 => Elem::BF16,
            DType::F32 => Elem::F32,
            DType::F64 => Elem::F64,
            DType::C64 => Elem::C64,
            DType::C128 => Elem::C128,
        }
    }
}

/// A ranked tensor type.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Ty {
    pub elem: Elem,
    pub dims: Dims,
}

impl Ty {
    pub fn new(elem: impl Into<Elem>, dims: &[i64]) -> Ty {
        Ty { elem: elem.into(), dims: dims.into() }
    }
    pub fn scalar(elem: impl Into<Elem>) -> Ty {
        Ty { elem: elem.into(), dims: Dims::new() }
    }
    pub fn rank(&self) -> usize {
        self.dims.len()
    }
    pub fn numel(&self) -> i64 {
        self.dims.iter().product()
    }
    pub fn with_elem(&self, elem: impl Into<Elem>) -> Ty {
        Ty { elem: elem.into(), dims: self.dims.clone() }
    }
    pub fn with_dims(&self, dims: &[i64]) -> Ty {
        Ty { elem: self.elem, dims: dims.into() }
    }
    /// The dtype, for types that come from tensors.
    pub fn dtype(&self) -> DType {
        self.elem.dtype().expect("not a tensor dtype")
    }
}

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("tensor<")?;
        for d in &self.dims {
            write!(f, "{d}x")?;
        }
        write!(f, "{}>", self.elem.mlir())
    }
}

/// `[1, 2, 3]` for attribute lists.
pub(crate) fn list(xs: impl IntoIterator<Item = impl fmt::Display>) -> String {
    let mut s = String::from("[");
    for (i, x) in xs.into_iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        let _ = write!(s, "{x}");
    }
    s.push(']');
    s
}

/// `array<i64: 1, 2>` for dense i64 array attributes.
pub(crate) fn i64_array(xs: &[i64]) -> String {
    if xs.is_empty() {
        return "array<i64>".into();
    }
    format!("array<i64: {}>", xs.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", "))
}
