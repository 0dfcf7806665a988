//! Element types (catalogue §1): ids, sizes, classes, names and the Rust element types.

use std::fmt;
use std::str::FromStr;

use half::{bf16, f16};
use num_complex::{Complex32, Complex64};

use crate::error::{Error, Result};

/// The element type of a tensor. Discriminants equal the PJRT C-API `PJRT_Buffer_Type` numbers.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum DType {
    /// Not a valid dtype (used for "unset" in configs).
    Invalid = 0,
    /// Boolean, one byte per element (never packed).
    Bool = 1,
    /// Signed 8-bit integer.
    Int8 = 2,
    /// Signed 16-bit integer.
    Int16 = 3,
    /// Signed 32-bit integer.
    Int32 = 4,
    /// Signed 64-bit integer.
    Int64 = 5,
    /// Unsigned 8-bit integer.
    Uint8 = 6,
    /// Unsigned 16-bit integer.
    Uint16 = 7,
    /// Unsigned 32-bit integer.
    Uint32 = 8,
    /// Unsigned 64-bit integer.
    Uint64 = 9,
    /// IEEE binary16.
    Float16 = 10,
    /// IEEE binary32.
    Float32 = 11,
    /// IEEE binary64.
    Float64 = 12,
    /// bfloat16 (1-8-7).
    BFloat16 = 13,
    /// Complex of two f32.
    Complex64 = 14,
    /// Complex of two f64.
    Complex128 = 15,
    /// 8-bit float E5M2 (name only).
    F8E5M2 = 16,
    /// 8-bit float E4M3FN (name only).
    F8E4M3FN = 17,
    /// 8-bit float E4M3B11FNUZ (name only).
    F8E4M3B11FNUZ = 18,
    /// 8-bit float E5M2FNUZ (name only).
    F8E5M2FNUZ = 19,
    /// 8-bit float E4M3FNUZ (name only).
    F8E4M3FNUZ = 20,
    /// Signed 4-bit integer, packed two per byte (storage only).
    Int4 = 21,
    /// Unsigned 4-bit integer, packed two per byte (storage only).
    Uint4 = 22,
    /// Token (name only).
    Token = 23,
    /// Signed 2-bit integer, packed four per byte (storage only).
    Int2 = 24,
    /// Unsigned 2-bit integer, packed four per byte (storage only).
    Uint2 = 25,
    /// 8-bit float E4M3 (name only).
    F8E4M3 = 26,
    /// 8-bit float E3M4 (name only).
    F8E3M4 = 27,
    /// 8-bit float E8M0FNU (name only).
    F8E8M0FNU = 28,
    /// 4-bit float E2M1FN (name only).
    F4E2M1FN = 29,
    /// Signed 1-bit integer (values 0 / −1), packed eight per byte (storage only).
    Int1 = 30,
    /// Unsigned 1-bit integer, packed eight per byte (storage only).
    Uint1 = 31,
}

/// The broad class of a dtype.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DTypeClass {
    /// `Bool`.
    Bool,
    /// Signed integers (including packed ones).
    SignedInt,
    /// Unsigned integers (including packed ones).
    UnsignedInt,
    /// F16, BF16, F32, F64.
    Float,
    /// C64, C128.
    Complex,
    /// F8/F4/Token/Invalid: declared, not usable.
    Unsupported,
}

use DType::*;

/// Every dtype, in id order.
pub const ALL_DTYPES: [DType; 32] = [
    Invalid,
    Bool,
    Int8,
    Int16,
    Int32,
    Int64,
    Uint8,
    Uint16,
    Uint32,
    Uint64,
    Float16,
    Float32,
    Float64,
    BFloat16,
    Complex64,
    Complex128,
    F8E5M2,
    F8E4M3FN,
    F8E4M3B11FNUZ,
    F8E5M2FNUZ,
    F8E4M3FNUZ,
    Int4,
    Uint4,
    Token,
    Int2,
    Uint2,
    F8E4M3,
    F8E3M4,
    F8E8M0FNU,
    F4E2M1FN,
    Int1,
    Uint1,
];

/// The dtypes tensors can hold ("supported" set of §1): Bool, 4 floats, 7 signed, 7 unsigned, 2 complex.
pub const SUPPORTED_DTYPES: [DType; 21] = [
    Bool, Int8, Int16, Int32, Int64, Uint8, Uint16, Uint32, Uint64, Float16, Float32, Float64, BFloat16, Complex64,
    Complex128, Int4, Uint4, Int2, Uint2, Int1, Uint1,
];

impl DType {
    /// Looks a dtype up by its PJRT id.
    pub fn from_id(id: u8) -> Option<DType> {
        ALL_DTYPES.iter().copied().find(|d| *d as u8 == id)
    }

    /// Size of one element in bits (Bool: 8; name-only dtypes: their nominal width; Invalid/Token: 0).
    pub fn bits(self) -> usize {
        match self {
            Invalid | Token => 0,
            Bool | Int8 | Uint8 => 8,
            Int16 | Uint16 | Float16 | BFloat16 => 16,
            Int32 | Uint32 | Float32 => 32,
            Int64 | Uint64 | Float64 | Complex64 => 64,
            Complex128 => 128,
            F8E5M2 | F8E4M3FN | F8E4M3B11FNUZ | F8E5M2FNUZ | F8E4M3FNUZ | F8E4M3 | F8E3M4 | F8E8M0FNU => 8,
            F4E2M1FN | Int4 | Uint4 => 4,
            Int2 | Uint2 => 2,
            Int1 | Uint1 => 1,
        }
    }

    /// Size of one element in bytes; 0 for packed (sub-byte) dtypes.
    pub fn size(self) -> usize {
        let b = self.bits();
        if b < 8 { 0 } else { b / 8 }
    }

    /// Whether elements are packed several per byte.
    pub fn is_packed(self) -> bool {
        matches!(self, Int4 | Uint4 | Int2 | Uint2 | Int1 | Uint1)
    }

    /// Values per byte for packed dtypes (1 otherwise).
    pub fn values_per_byte(self) -> usize {
        if self.is_packed() { 8 / self.bits() } else { 1 }
    }

    /// Bytes needed to store `n` elements (packed: `ceil(n·bits/8)`), saturating at
    /// `usize::MAX` (shapes that large are rejected by [`crate::ir::shape::Shape::validate`]).
    pub fn size_for(self, n: usize) -> usize {
        if self.is_packed() { n.div_ceil(self.values_per_byte()) } else { n.saturating_mul(self.size()) }
    }

    /// The class of this dtype.
    pub fn class(self) -> DTypeClass {
        match self {
            Bool => DTypeClass::Bool,
            Int8 | Int16 | Int32 | Int64 | Int4 | Int2 | Int1 => DTypeClass::SignedInt,
            Uint8 | Uint16 | Uint32 | Uint64 | Uint4 | Uint2 | Uint1 => DTypeClass::UnsignedInt,
            Float16 | BFloat16 | Float32 | Float64 => DTypeClass::Float,
            Complex64 | Complex128 => DTypeClass::Complex,
            _ => DTypeClass::Unsupported,
        }
    }

    /// F16, BF16, F32, F64 (complex excluded).
    pub fn is_float(self) -> bool {
        self.class() == DTypeClass::Float
    }
    /// F16 and BF16.
    pub fn is_half(self) -> bool {
        matches!(self, Float16 | BFloat16)
    }
    /// Every signed and unsigned integer, packed ones included.
    pub fn is_int(self) -> bool {
        matches!(self.class(), DTypeClass::SignedInt | DTypeClass::UnsignedInt)
    }
    /// Signed integers.
    pub fn is_signed_int(self) -> bool {
        self.class() == DTypeClass::SignedInt
    }
    /// Unsigned integers.
    pub fn is_unsigned(self) -> bool {
        self.class() == DTypeClass::UnsignedInt
    }
    /// C64 and C128.
    pub fn is_complex(self) -> bool {
        self.class() == DTypeClass::Complex
    }
    /// Bool.
    pub fn is_bool(self) -> bool {
        self == Bool
    }
    /// Numeric and usable for arithmetic: non-packed ints, floats and complex.
    pub fn is_numeric(self) -> bool {
        (self.is_int() && !self.is_packed()) || self.is_float() || self.is_complex()
    }
    /// Whether a tensor can hold this dtype (the supported set of §1).
    pub fn is_supported(self) -> bool {
        SUPPORTED_DTYPES.contains(&self)
    }

    /// C64 → F32, C128 → F64, floats → self, else Invalid.
    pub fn real_dtype(self) -> DType {
        match self {
            Complex64 => Float32,
            Complex128 => Float64,
            d if d.is_float() => d,
            _ => Invalid,
        }
    }

    /// Same class and no more bits than `target`.
    pub fn is_promotable_to(self, target: DType) -> bool {
        let same_class = match (self.class(), target.class()) {
            (DTypeClass::SignedInt | DTypeClass::UnsignedInt, DTypeClass::SignedInt | DTypeClass::UnsignedInt) => true,
            (a, b) => a == b && a != DTypeClass::Unsupported,
        };
        same_class && self.bits() <= target.bits()
    }

    /// The canonical short name used by the IR text format (`f32`, `bf16`, `i8`, `bool`, …).
    pub fn short_name(self) -> &'static str {
        match self {
            Invalid => "invalid",
            Bool => "bool",
            Int8 => "i8",
            Int16 => "i16",
            Int32 => "i32",
            Int64 => "i64",
            Uint8 => "u8",
            Uint16 => "u16",
            Uint32 => "u32",
            Uint64 => "u64",
            Float16 => "f16",
            Float32 => "f32",
            Float64 => "f64",
            BFloat16 => "bf16",
            Complex64 => "c64",
            Complex128 => "c128",
            F8E5M2 => "f8e5m2",
            F8E4M3FN => "f8e4m3fn",
            F8E4M3B11FNUZ => "f8e4m3b11fnuz",
            F8E5M2FNUZ => "f8e5m2fnuz",
            F8E4M3FNUZ => "f8e4m3fnuz",
            Int4 => "i4",
            Uint4 => "u4",
            Token => "token",
            Int2 => "i2",
            Uint2 => "u2",
            F8E4M3 => "f8e4m3",
            F8E3M4 => "f8e3m4",
            F8E8M0FNU => "f8e8m0fnu",
            F4E2M1FN => "f4e2m1fn",
            Int1 => "i1",
            Uint1 => "u1",
        }
    }

    /// The catalogue's long name (`Float32`, `BFloat16`, …).
    pub fn long_name(self) -> &'static str {
        match self {
            Invalid => "InvalidDType",
            Bool => "Bool",
            Int8 => "Int8",
            Int16 => "Int16",
            Int32 => "Int32",
            Int64 => "Int64",
            Uint8 => "Uint8",
            Uint16 => "Uint16",
            Uint32 => "Uint32",
            Uint64 => "Uint64",
            Float16 => "Float16",
            Float32 => "Float32",
            Float64 => "Float64",
            BFloat16 => "BFloat16",
            Complex64 => "Complex64",
            Complex128 => "Complex128",
            Int4 => "Int4",
            Uint4 => "Uint4",
            Int2 => "Int2",
            Uint2 => "Uint2",
            Int1 => "Int1",
            Uint1 => "Uint1",
            Token => "TOKEN",
            other => other.short_name_upper(),
        }
    }

    fn short_name_upper(self) -> &'static str {
        match self {
            F8E5M2 => "F8E5M2",
            F8E4M3FN => "F8E4M3FN",
            F8E4M3B11FNUZ => "F8E4M3B11FNUZ",
            F8E5M2FNUZ => "F8E5M2FNUZ",
            F8E4M3FNUZ => "F8E4M3FNUZ",
            F8E4M3 => "F8E4M3",
            F8E3M4 => "F8E3M4",
            F8E8M0FNU => "F8E8M0FNU",
            F4E2M1FN => "F4E2M1FN",
            _ => "?",
        }
    }

    /// Aliases accepted by [`FromStr`] besides the short and long names.
    fn aliases(self) -> &'static [&'static str] {
        match self {
            Invalid => &["INVALID"],
            Bool => &["PRED"],
            Int8 => &["S8", "I8"],
            Int16 => &["S16", "I16"],
            Int32 => &["S32", "I32"],
            Int64 => &["S64", "I64"],
            Uint8 => &["U8"],
            Uint16 => &["U16"],
            Uint32 => &["U32"],
            Uint64 => &["U64"],
            Float16 => &["F16"],
            Float32 => &["F32"],
            Float64 => &["F64"],
            BFloat16 => &["BF16"],
            Complex64 => &["C64"],
            Complex128 => &["C128"],
            Int4 => &["S4", "I4"],
            Uint4 => &["U4"],
            Int2 => &["S2", "I2"],
            Uint2 => &["U2"],
            Int1 => &["S1", "I1"],
            Uint1 => &["U1"],
            _ => &[],
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.long_name())
    }
}

impl FromStr for DType {
    type Err = Error;
    /// Parses a short name, long name or alias, case-insensitively.
    fn from_str(s: &str) -> Result<DType> {
        ALL_DTYPES
            .iter()
            .copied()
            .find(|d| {
                d.short_name().eq_ignore_ascii_case(s)
                    || d.long_name().eq_ignore_ascii_case(s)
                    || d.aliases().iter().any(|a| a.eq_ignore_ascii_case(s))
            })
            .ok_or_else(|| Error::invalid("dtype", format!("unknown dtype name {s:?}")))
    }
}

/// A Rust type that is the storage of one element of a dtype.
///
/// Implemented for `bool`, the native integers, `half::f16`, `half::bf16`, `f32`, `f64`,
/// `Complex32` and `Complex64`. Packed dtypes use raw bytes instead.
pub trait Element: Copy + Send + Sync + PartialEq + fmt::Debug + Default + 'static {
    /// The dtype whose storage this type is.
    const DTYPE: DType;
}

macro_rules! element {
    ($($t:ty => $d:ident),* $(,)?) => { $(impl Element for $t { const DTYPE: DType = DType::$d; })* };
}
element!(
    bool => Bool, i8 => Int8, i16 => Int16, i32 => Int32, i64 => Int64,
    u8 => Uint8, u16 => Uint16, u32 => Uint32, u64 => Uint64,
    f16 => Float16, bf16 => BFloat16, f32 => Float32, f64 => Float64,
    Complex32 => Complex64, Complex64 => Complex128,
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_match_pjrt() {
        assert_eq!(BFloat16 as u8, 13);
        assert_eq!(Complex128 as u8, 15);
        assert_eq!(Int4 as u8, 21);
        assert_eq!(Uint1 as u8, 31);
        for d in ALL_DTYPES {
            assert_eq!(DType::from_id(d as u8), Some(d));
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(Bool.size(), 1);
        assert_eq!(Complex128.size(), 16);
        assert_eq!(Int4.size(), 0);
        assert_eq!(Int4.size_for(3), 2);
        assert_eq!(Int2.size_for(5), 2);
        assert_eq!(Uint1.values_per_byte(), 8);
        assert_eq!(Float32.size_for(5), 20);
        // Saturating, never wrapping: 2^62 f32 elements are 2^64 bytes.
        assert_eq!(Float32.size_for(1 << 62), usize::MAX);
        assert_eq!(Float32.size_for(1 << 61), 1 << 63);
        // Packed sizes are exact up to usize::MAX elements: ceil((2^64 − 1)/2) = 2^63.
        assert_eq!(Int4.size_for(usize::MAX), 1 << 63);
        assert_eq!(Uint1.size_for(usize::MAX), (1 << 61));
        assert_eq!(Int2.size_for(9), 3);
    }

    #[test]
    fn names_parse_case_insensitively() {
        assert_eq!("pred".parse::<DType>().unwrap(), Bool);
        assert_eq!("S32".parse::<DType>().unwrap(), Int32);
        assert_eq!("bfloat16".parse::<DType>().unwrap(), BFloat16);
        assert_eq!("bf16".parse::<DType>().unwrap(), BFloat16);
        assert!("float7".parse::<DType>().is_err());
        for d in ALL_DTYPES {
            assert_eq!(d.short_name().parse::<DType>().unwrap(), d);
        }
    }

    #[test]
    fn classes() {
        assert!(Float16.is_float() && Float16.is_half());
        assert!(!Complex64.is_float());
        assert!(Int4.is_int() && Int4.is_packed() && !Int4.is_numeric());
        assert_eq!(Complex64.real_dtype(), Float32);
        assert!(Int8.is_promotable_to(Int32));
        assert!(!Float32.is_promotable_to(Int64));
        assert!(!F8E5M2.is_supported());
    }
}
