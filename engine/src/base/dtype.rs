//! Element types: the `DType` value, its Rust types, and PyTorch's type-promotion rules.

use std::fmt;

use half::{bf16, f16};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    Bool,
    U8,
    I32,
    I64,
    F16,
    BF16,
    F32,
    F64,
}

impl DType {
    pub const ALL: [DType; 8] = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I64,
        DType::I32,
        DType::U8,
        DType::Bool,
    ];

    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::Bool | DType::U8 => 1,
            DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::F32 => 4,
            DType::I64 | DType::F64 => 8,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }

    pub fn is_int(self) -> bool {
        matches!(self, DType::U8 | DType::I32 | DType::I64)
    }

    /// The short name used in cards and errors (`f32`, `bf16`, `i64`, `bool`).
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "u8",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }

    /// The enum variant, for fix-it hints (`DType::BF16`).
    pub fn variant_name(self) -> &'static str {
        match self {
            DType::Bool => "Bool",
            DType::U8 => "U8",
            DType::I32 => "I32",
            DType::I64 => "I64",
            DType::F16 => "F16",
            DType::BF16 => "BF16",
            DType::F32 => "F32",
            DType::F64 => "F64",
        }
    }

    /// The Rust element type that `to_vec::<T>()` reads this dtype as.
    pub fn rust_type(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "u8",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::F16 => "half::f16",
            DType::BF16 => "half::bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }

    /// PyTorch's promotion of two tensor dtypes: bool < ints < floats; within ints the wider;
    /// within floats the wider, and f16 with bf16 meet at f32.
    pub fn promote(a: DType, b: DType) -> DType {
        use DType::*;
        if a == b {
            return a;
        }
        match (a, b) {
            (F16, BF16) | (BF16, F16) => F32,
            _ => {
                let rank = |d: DType| match d {
                    Bool => 0,
                    U8 => 1,
                    I32 => 2,
                    I64 => 3,
                    F16 | BF16 => 4,
                    F32 => 5,
                    F64 => 6,
                };
                if rank(a) >= rank(b) { a } else { b }
            }
        }
    }

    /// The dtype of `tensor <op> scalar`: a scalar never widens a tensor within its category;
    /// it lifts bool to i64 and ints to the default float (f32) when it is a float.
    pub fn promote_scalar(tensor: DType, scalar_is_float: bool) -> DType {
        match (tensor, scalar_is_float) {
            (t, true) if !t.is_float() => DType::F32,
            (DType::Bool, false) => DType::I64,
            (t, _) => t,
        }
    }

    /// The float dtype an op that needs floats computes in (ints and bool become f32).
    pub fn to_float(self) -> DType {
        if self.is_float() { self } else { DType::F32 }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A Rust type that a tensor can hold. `to_f64`/`from_f64` are the generic, exact-where-possible
/// conversions used by casts and by slow paths; hot loops use the native type.
pub trait Element: Copy + Send + Sync + PartialOrd + fmt::Debug + 'static {
    const DTYPE: DType;
    fn to_f64(self) -> f64;
    fn from_f64(v: f64) -> Self;
    fn to_i64(self) -> i64;
    fn from_i64(v: i64) -> Self;
    fn zero() -> Self;
    fn one() -> Self;
}

macro_rules! element_int {
    ($t:ty, $d:expr) => {
        impl Element for $t {
            const DTYPE: DType = $d;
            fn to_f64(self) -> f64 {
                self as f64
            }
            // Float-to-int casts truncate toward zero and saturate, as Rust's `as` does.
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            fn to_i64(self) -> i64 {
                self as i64
            }
            fn from_i64(v: i64) -> Self {
                v as $t
            }
            fn zero() -> Self {
                0
            }
            fn one() -> Self {
                1
            }
        }
    };
}
element_int!(u8, DType::U8);
element_int!(i32, DType::I32);
element_int!(i64, DType::I64);

macro_rules! element_float {
    ($t:ty, $d:expr, $from:expr, $to:expr) => {
        impl Element for $t {
            const DTYPE: DType = $d;
            fn to_f64(self) -> f64 {
                $to(self)
            }
            fn from_f64(v: f64) -> Self {
                $from(v)
            }
            fn to_i64(self) -> i64 {
                $to(self) as i64
            }
            fn from_i64(v: i64) -> Self {
                $from(v as f64)
            }
            fn zero() -> Self {
                $from(0.0)
            }
            fn one() -> Self {
                $from(1.0)
            }
        }
    };
}
element_float!(f32, DType::F32, |v: f64| v as f32, |x: f32| x as f64);
element_float!(f64, DType::F64, |v: f64| v, |x: f64| x);
// f64 → f16/bf16 rounds through f32, as PyTorch's `Half(float)`/`BFloat16(float)` do on every
// device (and as the CUDA kernels do), so casts agree bit for bit even on rare double-rounding
// ties.
element_float!(
    f16,
    DType::F16,
    |v: f64| f16::from_f32(v as f32),
    |x: f16| x.to_f64()
);
element_float!(
    bf16,
    DType::BF16,
    |v: f64| bf16::from_f32(v as f32),
    |x: bf16| x.to_f64()
);

impl Element for bool {
    const DTYPE: DType = DType::Bool;
    fn to_f64(self) -> f64 {
        self as u8 as f64
    }
    fn from_f64(v: f64) -> Self {
        v != 0.0
    }
    fn to_i64(self) -> i64 {
        self as i64
    }
    fn from_i64(v: i64) -> Self {
        v != 0
    }
    fn zero() -> Self {
        false
    }
    fn one() -> Self {
        true
    }
}

/// Runs `$body` with `$t` bound to the Rust type of `$dtype`. Exported, so it names `DType` by
/// its public path (`$crate::DType`, re-exported by lib.rs): a user's crate expands it too.
#[macro_export]
#[doc(hidden)]
macro_rules! with_dtype {
    ($dtype:expr, $t:ident, $body:expr) => {
        match $dtype {
            $crate::DType::F32 => {
                type $t = f32;
                $body
            }
            $crate::DType::F64 => {
                type $t = f64;
                $body
            }
            $crate::DType::F16 => {
                type $t = half::f16;
                $body
            }
            $crate::DType::BF16 => {
                type $t = half::bf16;
                $body
            }
            $crate::DType::I64 => {
                type $t = i64;
                $body
            }
            $crate::DType::I32 => {
                type $t = i32;
                $body
            }
            $crate::DType::U8 => {
                type $t = u8;
                $body
            }
            $crate::DType::Bool => {
                type $t = bool;
                $body
            }
        }
    };
}

/// A number given to an op or a constructor: ints and floats are kept apart so that
/// `full(.., 3)` makes i64 and `full(.., 3.0)` makes f32, as in PyTorch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    Bool(bool),
    Int(i64),
    Float(f64),
}

impl Scalar {
    pub fn to_f64(self) -> f64 {
        match self {
            Scalar::Bool(b) => b as u8 as f64,
            Scalar::Int(i) => i as f64,
            Scalar::Float(x) => x,
        }
    }
    pub fn is_float(self) -> bool {
        matches!(self, Scalar::Float(_))
    }
    /// The dtype a tensor made from this scalar alone gets.
    pub fn default_dtype(self) -> DType {
        match self {
            Scalar::Bool(_) => DType::Bool,
            Scalar::Int(_) => DType::I64,
            Scalar::Float(_) => DType::F32,
        }
    }
    pub fn to_element<T: Element>(self) -> T {
        match self {
            Scalar::Bool(b) => T::from_i64(b as i64),
            Scalar::Int(i) => T::from_i64(i),
            Scalar::Float(x) => T::from_f64(x),
        }
    }
}

macro_rules! scalar_from {
    ($variant:ident, $as:ty: $($t:ty),*) => {
        $(impl From<$t> for Scalar {
            fn from(v: $t) -> Self {
                Scalar::$variant(v as $as)
            }
        })*
    };
}
scalar_from!(Int, i64: i8, i16, i32, i64, u8, u16, u32, usize, isize);
scalar_from!(Float, f64: f32, f64);
impl From<bool> for Scalar {
    fn from(v: bool) -> Self {
        Scalar::Bool(v)
    }
}
impl From<f16> for Scalar {
    fn from(v: f16) -> Self {
        Scalar::Float(v.to_f64())
    }
}
impl From<bf16> for Scalar {
    fn from(v: bf16) -> Self {
        Scalar::Float(v.to_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promotion_follows_pytorch() {
        use DType::*;
        assert_eq!(DType::promote(F32, F64), F64);
        assert_eq!(DType::promote(I64, F32), F32);
        assert_eq!(DType::promote(I32, I64), I64);
        assert_eq!(DType::promote(U8, I32), I32);
        assert_eq!(DType::promote(Bool, I64), I64);
        assert_eq!(DType::promote(F16, BF16), F32);
        assert_eq!(DType::promote(F16, F32), F32);
        assert_eq!(DType::promote(I64, F16), F16);
        assert_eq!(DType::promote_scalar(F16, true), F16);
        assert_eq!(DType::promote_scalar(I64, true), F32);
        assert_eq!(DType::promote_scalar(I64, false), I64);
    }
}
